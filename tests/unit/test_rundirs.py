"""Modes of what a lab puts on disk (emulator/rundirs.py), whatever the caller's umask:
the run root is chmodded only if rocelab made it (ROCELAB_RUN_ROOT=/tmp kept 0755 after
an `up`, losing its sticky bit), the lab dir is 0710 root:frr, a router's dir 0700 frr,
its configs 0640, state.json, logs and the engine's socket 0600. No root needed: chown
is recorded, not done."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from pathlib import Path

import pytest

from emulator import frr, lab, paths, rundirs, state
from emulator.engine.daemon import bind_private
from emulator.errors import RealizeError
from emulator.lab import load_topology

ROOT = Path(__file__).resolve().parents[2]


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@contextlib.contextmanager
def umask(value: int):
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def run_root(tmp_path, monkeypatch):
    """A shared, existing run root like /tmp (1777); chown and the o+x walk stubbed."""
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o1777)
    monkeypatch.setattr(paths, "RUN_ROOT", root)
    monkeypatch.setattr(state, "RUN_ROOT", root)
    owners: dict[str, tuple[int, int]] = {}
    monkeypatch.setattr(os, "chown", lambda p, uid, gid: owners.__setitem__(str(p), (uid, gid)))
    monkeypatch.setattr(rundirs, "check_passable", lambda p: None)  # pytest's tmp is 0700
    return root, owners


def test_an_existing_run_root_is_never_chmodded_and_the_lab_is_closed(run_root):
    root, owners = run_root
    _, plan, rendered = load_topology(ROOT / "topologies" / "clos-2x4.yaml", "xc-modes")
    with umask(0):
        lab._claim_run_dir(plan.lab)
        frr.prepare_run_dirs(plan, rendered)
    assert mode(root) == 0o1777  # /tmp keeps its sticky bit
    lab_dir = root / "xc-modes"
    assert mode(lab_dir) == 0o710 and owners[str(lab_dir)][0] == 0  # root:frr, search only
    leaf = lab_dir / "leaf1"
    assert mode(leaf) == 0o700 and owners[str(leaf)] == owners[str(leaf / "bgpd.conf")]
    assert {mode(f) for f in leaf.iterdir()} == {0o640}  # configs: BGP passwords live here


def test_a_run_root_rocelab_creates_is_0755_whatever_the_umask(tmp_path):
    new = tmp_path / "a" / "b"
    with umask(0o077):
        rundirs.make_dirs(new, rundirs.RUN_ROOT_MODE)
    assert mode(new) == mode(new.parent) == 0o755
    new.chmod(0o700)
    rundirs.make_dirs(new, rundirs.RUN_ROOT_MODE)
    assert mode(new) == 0o700  # it exists: not ours to chmod


def test_a_run_root_frr_cannot_pass_is_named(tmp_path):
    closed = tmp_path / "closed"
    (closed / "run").mkdir(parents=True)
    closed.chmod(0o700)
    with pytest.raises(RealizeError, match=f"^{closed} is mode 0700: FRR .*chmod o\\+x {closed}"):
        rundirs.check_passable(closed / "run")


def test_state_logs_and_the_engine_socket_are_0600_under_umask_0(run_root, tmp_path):
    root, _ = run_root
    (root / "xc-s").mkdir()
    with umask(0):
        state.write("xc-s", {"lab": "xc-s"})
        with rundirs.open_private(tmp_path / "engine.log") as log:
            log.write(b"x")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        bind_private(s, tmp_path / "engine.sock")
        s.close()
    assert mode(root / "xc-s" / "state.json") == 0o600
    assert mode(tmp_path / "engine.log") == 0o600
    assert mode(tmp_path / "engine.sock") == 0o600
    assert os.umask(0o022) == 0o022  # bind_private put the umask back
