"""up as a transaction and down from kernel state: crashes, timeouts, bad input, --all."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from emulator import netns, procs
from emulator.paths import lab_run_dir

from .conftest import PREFIX, ROCELAB, cli, leftovers, poll


def traces(name: str) -> dict:
    return leftovers(name_prefix=name)


def test_bad_topology_creates_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"name: {PREFIX}bad\nspines: 0\n")
    res = cli("up", str(bad), check=False)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0
    assert "spines" in res.stderr and "greater than or equal to 1" in res.stderr
    assert not traces(f"{PREFIX}bad")


def test_convergence_timeout_rolls_back_everything():
    res = cli("up", "topologies/clos-2x4.yaml", "--name", f"{PREFIX}timeout", "--timeout", "0.2",
              check=False)
    assert res.returncode == 6, res.stderr
    assert "did not converge" in res.stderr and "fib:" in res.stderr  # says which check, where
    assert not traces(f"{PREFIX}timeout")


def test_sigkill_midway_then_down_leaves_nothing():
    name = f"{PREFIX}killed"
    proc = subprocess.Popen([ROCELAB, "up", "topologies/clos-2x4.yaml", "--name", name],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # kill once daemons run but before convergence
        poll(lambda: any(tag == name for tag in procs.tagged_processes().values()),
             timeout=30, interval=0.01, what="first FRR daemon")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert traces(name), "the kill came too late to leave anything"
    (lab_run_dir(name) / "state.json").unlink(missing_ok=True)  # down must not need it
    res = cli("down", name)
    assert "namespaces" in res.stdout
    assert not traces(name)
    assert cli("down", name).stdout.strip() == f"lab {name}: nothing to remove"  # idempotent


def test_sigterm_during_up_rolls_back():
    name = f"{PREFIX}term"
    proc = subprocess.Popen([ROCELAB, "up", "topologies/clos-2x4.yaml", "--name", name],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    poll(lambda: any(n.startswith(name) for n in netns.list_names()), timeout=30,
         interval=0.005, what="first namespace")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert not traces(name), err


def test_down_all_with_a_prefix_removes_those_labs_and_nothing_else():
    """`down --all --prefix`: the suite never runs a bare `down --all`, which would take every
    lab on the machine, a user's too. Another lab (here one tagged process of it) and a plain
    namespace survive."""
    foreign = f"{PREFIX}foreign-ns"  # an ordinary namespace someone else made
    other = f"{PREFIX}other-lab"  # not under the prefix given to down
    netns.create(foreign)
    keeper = subprocess.Popen(["sleep", "600"], env=procs.base_env(other), start_new_session=True)
    try:
        cli("up", "topologies/clos-2x4.yaml", "--name", f"{PREFIX}all-a")
        res = cli("down", "--all", "--prefix", f"{PREFIX}all-")
        assert f"lab {PREFIX}all-a:" in res.stdout and other not in res.stdout
        assert not traces(f"{PREFIX}all-a")
        assert netns.exists(foreign) and keeper.poll() is None
        assert procs.tagged_processes().get(keeper.pid) == other
    finally:
        keeper.kill()
        keeper.wait(10)
        netns.remove(foreign)


def test_commands_on_missing_lab_fail_clearly():
    res = cli("status", f"{PREFIX}nope", check=False)
    assert res.returncode == 4 and f"no lab named {PREFIX}nope" in res.stderr
    res = cli("exec", f"{PREFIX}nope", "leaf1", "--", "true", check=False)
    assert res.returncode == 4


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
REPO = Path(__file__).resolve().parents[2]
# Runs the CLI from the copy given as argv[1], and proves that copy is what was imported.
BOOT = ("import sys, emulator\n"
        "assert emulator.__file__.startswith(sys.argv[1] + '/'), 'imported ' + emulator.__file__\n"
        "from emulator.cli import main\n"
        "sys.argv[:2] = ['rocelab']\n"
        "sys.exit(main())\n")
# As root: render once in this process, then list every module file that took.
IMPORTED = ("import json, sys\n"
            "from emulator.cli import main\n"
            "main(sys.argv[1:])\n"
            "print(json.dumps([getattr(m, '__file__', None) or '' for m in list(sys.modules.values())]))\n")


def as_nobody(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(NOBODY + argv, capture_output=True, text=True, timeout=120, **kw)


def _dir_nobody_can_enter() -> Path | None:
    """A fresh 0755 directory every user can reach (the temp dir may sit below a private one)."""
    for base in dict.fromkeys([tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"]):
        if not Path(base).is_dir():
            continue
        d = Path(tempfile.mkdtemp(prefix="rocelab-render-", dir=base))
        d.chmod(0o755)
        if as_nobody(["test", "-x", str(d)]).returncode == 0:
            return d
        shutil.rmtree(d)
    return None


def _copy_dependencies(into: Path, scratch: Path) -> None:
    """Copy the third-party packages `render` imports (as a render run here shows) into `into`."""
    topology = str(REPO / "topologies" / "clos-8x16.yaml")
    res = subprocess.run([sys.executable, "-c", IMPORTED, "render", topology, "-o", str(scratch)],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert res.returncode == 0, res.stderr
    sites = [Path(p) for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    into.mkdir()
    for f in map(Path, filter(None, json.loads(res.stdout.splitlines()[-1]))):
        site_dir = next((d for d in sites if f.is_relative_to(d)), None)
        if site_dir is None:
            continue  # the standard library (the interpreter's own) or this checkout
        top = f.relative_to(site_dir).parts[0]
        if top.startswith(("__editable__", "_distutils_hack")) or (into / top).exists():
            continue
        if (site_dir / top).is_dir():
            shutil.copytree(site_dir / top, into / top, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(site_dir / top, into / top)


def _python_nobody_can_run() -> tuple[str | None, list[str]]:
    """This Python, or else the system's of the same version (the deps' binaries need it)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    tried = []
    for python in dict.fromkeys([sys.executable, shutil.which(version) or "", f"/usr/bin/{version}"]):
        if not python:
            continue
        probe = as_nobody([python, "-S", "-c", f"import sys; sys.exit(sys.version_info[:2] != "
                           f"{tuple(sys.version_info[:2])})"])
        if probe.returncode == 0:
            return python, tried
        tried.append(f"{python}: {(probe.stderr.strip().splitlines() or ['another version'])[-1]}")
    return None, tried


def test_render_needs_no_root_and_touches_nothing():
    """`render` as user nobody (no root, no capabilities) writes every config and creates nothing.

    nobody runs a copy of this checkout's package, templates and topology, and of the
    third-party packages they import, in a directory nobody can enter: the checkout (and
    its virtualenv) may sit below a directory only its owner can enter, and the package
    is installed editable, i.e. imported from there. `python -S` keeps every other
    site-packages out. The test skips, saying why, only when nobody can run no Python of
    this version at all.
    """
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is needed to run render as nobody")
    python, tried = _python_nobody_can_run()
    if python is None:
        pytest.skip(f"user nobody can run no python{sys.version_info.major}.{sys.version_info.minor}: "
                    + "; ".join(tried))
    base = _dir_nobody_can_enter()
    if base is None:
        pytest.skip("user nobody can enter none of the temp dir, /tmp, /var/tmp, /dev/shm")
    try:
        copy, out = base / "src", base / "out"
        shutil.copytree(REPO / "emulator", copy / "emulator", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(REPO / "frr-templates", copy / "frr-templates")
        (copy / "topologies").mkdir()
        shutil.copy(REPO / "topologies" / "clos-8x16.yaml", copy / "topologies")
        _copy_dependencies(base / "deps", base / "scratch")
        out.mkdir()
        out.chmod(0o777)
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": str(out),
               "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": f"{copy}{os.pathsep}{base / 'deps'}"}
        before = set(netns.list_names())
        res = as_nobody([python, "-S", "-c", BOOT, str(copy), "render", "topologies/clos-8x16.yaml",
                         "-o", str(out / "r")], env=env, cwd=copy)
        assert res.returncode == 0, res.stderr
        assert res.stdout.startswith("lab clos-8x16: wrote "), res.stdout
        assert (out / "r" / "leaf16" / "bgpd.conf").stat().st_uid == 65534  # written by nobody
        assert set(netns.list_names()) == before
    finally:
        shutil.rmtree(base)
