"""What an rxe guest sees of the host (issue 24, item 3), without root: the minimal /etc,
the exports, the kernel command line and QEMU's sandbox options."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from emulator.rxe import guest, guestfs
from emulator.rxe.vm import RxeVm


def fake_etc(root: Path) -> Path:
    src = root / "etc"
    (src / "libibverbs.d").mkdir(parents=True)
    (src / "libibverbs.d" / "rxe.driver").write_text("driver rxe\n")
    (src / "libibverbs.d" / "private.driver").write_text("secret\n")
    (src / "libibverbs.d" / "private.driver").chmod(0o600)
    (src / "libibverbs.d" / "leak.driver").symlink_to("/etc/shadow")
    (src / "ld.so.cache").write_bytes(b"cache")
    (src / "shadow").write_text("root:$6$secret:::\n")
    (src / "passwd").write_text("root:x:0:0::/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\n")
    return src


def test_the_guests_etc_holds_only_public_files_it_needs(tmp_path):
    dest = guestfs.build_etc(tmp_path / "guest-etc", "prefill1", fake_etc(tmp_path))
    assert (dest / "ld.so.cache").read_bytes() == b"cache"
    assert (dest / "libibverbs.d" / "rxe.driver").read_text() == "driver rxe\n"
    assert not (dest / "libibverbs.d" / "private.driver").exists()  # 0600 on the host: not copied
    assert os.readlink(dest / "libibverbs.d" / "leak.driver") == "/etc/shadow"  # a link, not its target
    assert not (dest / "shadow").exists()
    assert "alice" not in (dest / "passwd").read_text()  # written, not the host's
    assert (dest / "hostname").read_text() == "prefill1\n"
    again = guestfs.build_etc(dest, "decode1", fake_etc(tmp_path / "other"))
    assert (again / "hostname").read_text() == "decode1\n"  # rebuilt fresh at each boot


def test_exports_are_usr_the_etc_and_the_package_never_the_root(tmp_path):
    found = guestfs.exports(tmp_path / "guest-etc", guest.REPO)
    assert found[0] == guestfs.Export("etc", tmp_path / "guest-etc", "/etc")
    hosts = [e.host for e in found]
    assert Path("/usr") in hosts and Path("/") not in hosts and Path("/etc") not in hosts
    assert len({e.tag for e in found}) == len(found)
    for d in (guest.REPO, Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()):
        assert any(d == h or h in d.parents for h in hosts), d  # the package, venv, Python


def test_package_dirs_are_outermost_and_outside_usr(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "repo" / ".venv"))
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    monkeypatch.setattr(sys, "executable", "/usr/bin/python3")
    assert guestfs.package_dirs(tmp_path / "repo") == [(tmp_path / "repo").resolve()]


@pytest.mark.parametrize("bad", ["/srv/my repo", "/srv/a,b", "/srv/a:b"])
def test_a_path_the_command_line_cannot_carry_is_refused(bad):
    with pytest.raises(guestfs.GuestFsError, match=f"an rxe guest cannot mount {bad}: its path holds"):
        guestfs.exports(Path("/run/rocelab/l/h/guest-etc"), Path(bad))


def test_qemu_is_sandboxed_runs_as_nobody_and_serves_no_root(tmp_path):
    vm = RxeVm(lab="l", name="prefill1", netns="l-prefill1", mac="02:00:00:00:00:01",
               address="10.1.1.1/31", gateway="10.1.1.0", mtu=1500, run_dir=tmp_path)
    argv = vm.qemu_argv(tmp_path / "vmlinuz", tmp_path / "initrd")
    sandbox = argv[argv.index("-sandbox") + 1]
    assert sandbox.startswith("on,") and "spawn=deny" in sandbox and "obsolete=deny" in sandbox
    assert argv[argv.index("-runas") + 1] == "nobody"
    fsdevs = [argv[i + 1] for i, a in enumerate(argv) if a == "-fsdev"]
    assert fsdevs and all("readonly=on" in f and "multidevs=forbid" in f for f in fsdevs)
    assert not any(",path=/," in f or f.endswith("path=/") for f in fsdevs)
    assert f",path={tmp_path / 'guest-etc'}," in fsdevs[0]
    cmdline = argv[argv.index("-append") + 1].split()
    mounts = next(w for w in cmdline if w.startswith("rocelab.mounts="))
    assert mounts.split("=", 1)[1].split(",")[:2] == ["etc:/etc", "x0:/usr"]
