"""`rocelab exec LAB NODE -- vtysh` reaches the node's own FRR, never the machine's.

Issue 15 finding 8: without --vty_socket, vtysh looks in /var/run/frr, which
is the host's. A decoy daemon socket there records any connection; exec on a
router must reach the lab's zebra, on a host no FRR at all, and neither may
touch the decoy. The decoy lives in a private mount namespace (frr_decoy.py): the
test runs on a machine whose own FRR has a zebra.vty there, and never touches it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROCELAB

HOST_FRR = Path(os.path.realpath("/var/run/frr"))
DECOY = Path(__file__).with_name("frr_decoy.py")


@pytest.fixture(scope="module")
def clos(clos_unnumbered):
    return clos_unnumbered


@pytest.fixture(scope="module")
def frr_dir():
    """The host's FRR socket directory, made (empty) for the test if the host has none."""
    made = not HOST_FRR.exists()
    HOST_FRR.mkdir(exist_ok=True)
    try:
        yield HOST_FRR
    finally:
        if made:
            HOST_FRR.rmdir()


def beside_decoy(*argv: str) -> dict:
    """ARGV run with a decoy zebra.vty in the host's FRR directory (frr_decoy.py's report)."""
    res = subprocess.run(["unshare", "--mount", "--propagation", "private", "--",
                          sys.executable, str(DECOY), str(HOST_FRR), "--", *argv],
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def exec_beside_decoy(lab, node: str, *argv: str) -> dict:
    return beside_decoy(ROCELAB, "exec", lab.name, node, "--", *argv)


def test_plain_vtysh_in_exec_reaches_the_routers_own_frr(clos, frr_dir):
    res = exec_beside_decoy(clos, "leaf1", "vtysh", "-c", "show running-config")
    assert res["rc"] == 0 and "hostname leaf1" in res["stdout"], res
    assert res["hits"] == 0  # the host's socket directory was never consulted


def test_plain_vtysh_on_a_host_reaches_no_frr(clos, frr_dir):
    res = exec_beside_decoy(clos, "prefill1", "vtysh", "-c", "show version")
    assert res["rc"] != 0 and res["hits"] == 0, res


def test_exec_leaves_the_hosts_frr_directory_as_it_was(clos, frr_dir):
    host_before = sorted(p.name for p in HOST_FRR.iterdir())
    res = exec_beside_decoy(clos, "leaf2", "ls", "/var/run/frr")
    assert res["rc"] == 0 and res["before"] == res["after"] == ["zebra.vty"], res
    assert sorted(p.name for p in HOST_FRR.iterdir()) == host_before


def test_the_decoy_is_seen_without_exec(frr_dir):
    """The control: a plain vtysh in the decoy's namespace does reach the decoy, so the
    zero hits above mean exec kept it away."""
    assert beside_decoy("vtysh", "-c", "show version")["hits"] > 0
