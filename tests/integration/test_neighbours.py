"""The neighbour budget (issue 15 finding 9): the host's ARP/ND tables are shared by every
namespace. A lab that would overflow them is refused before anything exists (exit 12);
with --raise-neigh-limit the limit is raised, recorded, and restored by the `down` that
leaves no lab -- also when `up` itself was killed.

16 spines x 33 leaves, unnumbered: 528 fabric links, 1,056 IPv6 neighbours, against the
default gc_thresh3 of 1,024. It converges in ~12 s on the reference machine.
"""

from __future__ import annotations

import signal
import subprocess

import pytest

from emulator import neighbours, netns

from .conftest import PREFIX, ROCELAB, cli, leftovers, poll, wait_for_line

V6 = "/proc/sys/net/ipv6/neigh/default/gc_thresh3"


def _read(path: str) -> int:
    with open(path) as f:
        return int(f.read())


@pytest.fixture
def big(tmp_path):
    name = f"{PREFIX}neigh"
    path = tmp_path / "big.yaml"
    path.write_text(f"name: {name}\nspines: 16\nleaves: 33\nhosts: {{per_leaf: 1}}\n")
    before = _read(V6)
    if before >= 1400 or neighbours.record_path().exists():
        pytest.skip(f"this host's limit is already raised ({before}): nothing to show")
    yield name, path
    cli("down", name, check=False)
    if neighbours.record_path().exists():  # never leave the host changed, whatever failed
        neighbours.restore()
    assert _read(V6) == before


def test_a_lab_that_would_overflow_the_table_is_refused_before_anything_exists(big):
    name, path = big
    res = cli("up", str(path), check=False)
    assert res.returncode == 12
    assert "net.ipv6.neigh.default.gc_thresh3 is 1024" in res.stderr
    assert "at least 1321" in res.stderr and "--raise-neigh-limit" in res.stderr
    assert res.stderr.strip().count("\n") == 0
    assert not leftovers(name) and not [n for n in netns.list_names() if n.startswith(name)]
    assert _read(V6) == 1024 and not neighbours.record_path().exists()


def test_the_opt_in_flag_raises_the_limit_and_the_last_down_restores_it(big):
    name, path = big
    cli("up", str(path), "--raise-neigh-limit", timeout=180)
    assert _read(V6) >= 1321 and neighbours.record_path().exists()
    assert cli("status", name, "--json", check=False).returncode == 0  # every session up
    cli("down", name)
    assert _read(V6) == 1024 and not neighbours.record_path().exists()


def test_a_killed_up_still_gets_the_limit_back_at_the_next_down(big):
    name, path = big
    proc = subprocess.Popen([ROCELAB, "up", str(path), "--raise-neigh-limit"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_line(proc, "creating", 30)  # the limit is raised, the record written
    proc.send_signal(signal.SIGKILL)  # no rollback at all
    proc.wait(10)
    assert neighbours.record_path().exists()
    cli("down", name)
    poll(lambda: not leftovers(name), timeout=10, what="nothing left")
    assert _read(V6) == 1024 and not neighbours.record_path().exists()
