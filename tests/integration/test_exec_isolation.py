"""`rocelab exec LAB NODE -- vtysh` reaches the node's own FRR, never the machine's.

Issue 15 finding 8: without --vty_socket, vtysh looks in /var/run/frr, which
is the host's. A decoy daemon socket there records any connection; exec on a
router must reach the lab's zebra, on a host no FRR at all, and neither may
touch the decoy.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from .conftest import PREFIX, make_lab

HOST_FRR = Path(os.path.realpath("/var/run/frr"))


@pytest.fixture(scope="module")
def clos():
    yield from make_lab("topologies/clos-2x4.yaml", f"{PREFIX}exec")


@pytest.fixture
def decoy():
    """A listening zebra.vty in the host's FRR socket directory that counts connections."""
    made_dir = not HOST_FRR.exists()
    path = HOST_FRR / "zebra.vty"
    if path.exists():
        pytest.skip(f"{path} belongs to an FRR this machine runs: not touching it")
    HOST_FRR.mkdir(exist_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(8)
    server.settimeout(0.2)
    hits: list[int] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            hits.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield hits
    finally:
        stop.set()
        thread.join()
        server.close()
        path.unlink()
        if made_dir:
            HOST_FRR.rmdir()


def test_plain_vtysh_in_exec_reaches_the_routers_own_frr(clos, decoy):
    out = clos.exec("leaf1", "vtysh", "-c", "show running-config").stdout
    assert "hostname leaf1" in out
    assert decoy == []  # the host's socket directory was never consulted


def test_plain_vtysh_on_a_host_reaches_no_frr(clos, decoy):
    res = clos.exec("prefill1", "vtysh", "-c", "show version", check=False)
    assert res.returncode != 0
    assert decoy == []


def test_exec_leaves_the_hosts_frr_directory_as_it_was(clos, decoy):
    before = sorted(p.name for p in HOST_FRR.iterdir())
    clos.exec("leaf2", "ls", "/var/run/frr")
    assert sorted(p.name for p in HOST_FRR.iterdir()) == before
