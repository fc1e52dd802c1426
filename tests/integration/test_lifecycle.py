"""up as a transaction and down from kernel state: crashes, timeouts, bad input, --all."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from emulator import netns, state
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
        poll(lambda: any(tag == name for tag in state.tagged_processes().values()),
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


def test_down_all_removes_rocelab_labs_and_nothing_else():
    foreign = f"{PREFIX}foreign-ns"  # an ordinary namespace someone else made
    netns.create(foreign)
    try:
        cli("up", "topologies/clos-2x4.yaml", "--name", f"{PREFIX}all-a")
        res = cli("down", "--all")
        assert f"lab {PREFIX}all-a:" in res.stdout
        assert not traces(f"{PREFIX}all-a")
        assert netns.exists(foreign)
    finally:
        netns.remove(foreign)


def test_commands_on_missing_lab_fail_clearly():
    res = cli("status", f"{PREFIX}nope", check=False)
    assert res.returncode == 4 and f"no lab named {PREFIX}nope" in res.stderr
    res = cli("exec", f"{PREFIX}nope", "leaf1", "--", "true", check=False)
    assert res.returncode == 4


def test_render_needs_no_root_and_touches_nothing():
    out = Path(tempfile.mkdtemp(prefix="rocelab-render-"))
    try:
        out.chmod(0o777)
        before = set(netns.list_names())
        res = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                              ROCELAB, "render", "topologies/clos-8x16.yaml", "-o", str(out / "r")],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert (out / "r" / "leaf16" / "bgpd.conf").exists()
        assert set(netns.list_names()) == before
    finally:
        shutil.rmtree(out)
