"""rxe hosts: clos-2x4-rxe with prefill1 and decode1 as QEMU/TCG guests running Linux
Soft-RoCE; real perftest and ibv_rc_pingpong between them across the fabric. (That `down`
stops the guests is checked where the package's lab comes down: conftest.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

from emulator.rxe import guest, guestfs, hosts

from ..conftest import cli, poll, rxe_vm
from .conftest import NAME

PERFTEST_PORT = 18515
vm = rxe_vm


def listening(lab_, host, port=PERFTEST_PORT):
    rc, out, _ = vm(lab_, host).exec(["ss", "-Hltn"], timeout=10)
    return rc == 0 and f":{port} " in out


def test_guest_has_rxe0(lab):
    assert "rxe0/1 state ACTIVE" in cli("exec", NAME, "prefill1", "--", "rdma", "link").stdout
    info = cli("exec", NAME, "decode1", "--", "ibv_devinfo", "-d", "rxe0").stdout
    assert "PORT_ACTIVE" in info and "Ethernet" in info
    # GID 1 is the RoCEv2 IPv4-mapped one (0: the MAC's link-local)
    addr = lab.plan.node("decode1").address
    gid = cli("exec", NAME, "decode1", "--", "cat", "/sys/class/infiniband/rxe0/ports/1/gids/1",
              "/sys/class/infiniband/rxe0/ports/1/gid_attrs/types/1").stdout.split("\n")
    assert gid[0].endswith("ffff:" + "".join(f"{int(o):02x}" for o in addr.split(".")[:2]) + ":"
                           + "".join(f"{int(o):02x}" for o in addr.split(".")[2:]))
    assert gid[1] == "RoCE v2"


def test_ib_write_bw_across_the_fabric(lab):
    server, client = vm(lab, "decode1"), vm(lab, "prefill1")
    argv = ["ib_write_bw", "-d", "rxe0", "-x", "1", "-F", "-s", "65536", "-n", "300"]
    before = client.counters()  # the package's lab: other modules' traffic came first
    job = server.spawn(argv)
    try:
        poll(lambda: listening(lab, "decode1"), timeout=30, what="ib_write_bw listening")
        res = cli("exec", NAME, "prefill1", "--", *argv, lab.plan.node("decode1").address)
        rows = re.findall(r"^\s*65536\s+300\s+([\d.]+)\s+([\d.]+)", res.stdout, re.M)
        assert rows, res.stdout
        assert float(rows[0][1]) > 1.0  # MB/s: TCG is slow, but it moved the data
        assert server.wait(job, timeout=30) == 0
    finally:
        server.kill(job)
    sent = {k: v - before.get(k, 0) for k, v in client.counters().items()}
    assert sent["sent_pkts"] > 300 and sent["send_err"] == 0


def test_rc_pingpong(lab):
    server = vm(lab, "decode1")
    argv = ["ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-n", "100"]
    job = server.spawn(argv)
    try:
        poll(lambda: listening(lab, "decode1"), timeout=30, what="ibv_rc_pingpong listening")
        res = cli("exec", NAME, "prefill1", "--", *argv, lab.plan.node("decode1").address)
        assert re.search(r"\d+ bytes in [\d.]+ seconds", res.stdout), res.stdout + res.stderr
        assert server.wait(job, timeout=30) == 0
    finally:
        server.kill(job)


# Runs as root in the guest (its own /usr/bin/python3): tries the host's secrets where the
# guest sees them, then looks inside every 9p export QEMU offers (where /init mounted it,
# or mounted here if /init did not: a virtio-9p channel mounts once at a time).
PEEK = r"""
import ctypes, glob, json, os
libc = ctypes.CDLL(None, use_errno=True)
def head(p):
    try:
        with open(p, "rb") as f:
            return f.read(256).hex()
    except OSError:
        return None
tags = sorted(open(t).read().strip("\0\n ")
              for t in glob.glob("/sys/bus/virtio/drivers/9pnet_virtio/virtio*/mount_tag"))
where = {ln.split()[0]: ln.split()[1] for ln in open("/proc/mounts") if ln.split()[2] == "9p"}
found = []
for i, tag in enumerate(tags):
    if tag not in where:
        where[tag] = f"/mnt/peek{i}"
        os.makedirs(where[tag], exist_ok=True)
        if libc.mount(tag.encode(), where[tag].encode(), b"9p", 1, b"trans=virtio") != 0:
            raise OSError(ctypes.get_errno(), f"mount {tag}")  # 1: MS_RDONLY
    found += [f"{tag}:{r}" for r in ("etc/shadow", "shadow", "proc/1/environ", "1/environ", "root",
                                     "run/rocelab", "rocelab")
              if os.path.lexists(os.path.join(where[tag], r))]
print(json.dumps({"shadow": head("/etc/shadow"), "root": sorted(os.listdir("/root")),
                  "init": open("/proc/1/cmdline").read(), "tags": tags, "found": found,
                  "run_dirs": os.path.lexists("/run/rocelab")}))
"""


def test_the_guest_reads_none_of_the_hosts_files(lab):
    """Issue 24, item 3: only /usr, a minimal /etc, the package, its venv and Python are
    exported (read-only, one 9p export each), by a QEMU that runs as nobody under its
    seccomp sandbox: root in the guest reads neither the host's /etc/shadow, nor /root,
    nor the host's /proc, nor any lab's run dir, in any export QEMU offers."""
    assert Path("/etc/shadow").exists()  # what the guest must not see is there to see
    rc, out, err = vm(lab, "prefill1").exec(["python3", "-c", PEEK], timeout=60)
    assert rc == 0, err
    seen = json.loads(out)
    assert seen["shadow"] is None
    exported = {p.relative_to("/root").parts[0] for p in guestfs.package_dirs(guest.REPO)
                if Path("/root") in p.parents}
    assert set(seen["root"]) <= exported, seen["root"]  # at most the path to an export
    assert "/init" in seen["init"].split("\0")  # its /proc is its own: PID 1 is the guest's /init
    assert len(seen["tags"]) >= 3 and seen["found"] == []  # /etc, /usr, the package at least
    assert not seen["run_dirs"]  # no lab's run dir, its own or another's
    for pid in hosts.running(NAME).values():
        status = dict(ln.split(":", 1) for ln in Path(f"/proc/{pid}/status").read_text().splitlines())
        assert status["Uid"].split() == ["65534"] * 4  # nobody: real, effective, saved, fs
        assert status["Seccomp"].strip() == "2" and status["CapEff"].strip() == "0" * 16
