"""The neighbour budget (issue 15 finding 9): the host's ARP/ND tables are shared by every
namespace. A lab that would overflow them is refused before anything exists (exit 12);
with --raise-neigh-limit the limit is raised, recorded, and restored by the `down` that
leaves no lab -- also when `up` itself was killed, and when `up` failed.

A routed fabric pins every wire's neighbour (permanent entries: exempt from the limit),
so what can still overflow is one L2 segment: 36 hosts that all resolve each other need
1,260 ARP entries against the default gc_thresh3 of 1,024. That a routed fabric comes up
inside the default limit (issue 16) is test_scale.py's 16 x 64 fabric: 2,048 fabric link
ends, each pinned, where 16 x 33's 1,056 once needed as many IPv6 entries.
"""

from __future__ import annotations

import signal
import subprocess

import pytest

from emulator import neighbours, netns

from .conftest import PREFIX, ROCELAB, cli, leftovers, poll, wait_for_line

V4 = "/proc/sys/net/ipv4/neigh/default/gc_thresh3"
V6 = "/proc/sys/net/ipv6/neigh/default/gc_thresh3"


def _read(path: str) -> int:
    with open(path) as f:
        return int(f.read())


def hosts_to_overflow(limit: int) -> int:
    """Hosts on one L2 segment that need more ARP entries (n x (n - 1)) than `limit`: 36
    against the default 1,024; more on a host whose limit is already raised."""
    n = 36
    while n * (n - 1) <= limit:
        n += 4
    return n


@pytest.fixture
def big(tmp_path, no_shared_lab):
    """A lab that overflows this host's ARP table as it is now: the test runs whatever the
    host's limit, and compares with the value it read at the start."""
    name = f"{PREFIX}neigh"
    if neighbours.record_path().exists():
        pytest.fail(f"{neighbours.record_path()} exists: a lab holds the host's neighbour limit "
                    "raised (or a killed run left the record): `rocelab down` that lab first")
    before = _read(V4)
    n = hosts_to_overflow(before)
    if n > 4 * 64:
        pytest.fail(f"gc_thresh3 is {before}: no lab of 4 leaves x 64 hosts overflows it")
    path = tmp_path / "big.yaml"
    path.write_text(f"name: {name}\nfabric: l2\nspines: 1\nleaves: 4\nhosts: {{per_leaf: {n // 4}}}\n"
                    "l2: {stp: false, root: spine1}\n")
    yield name, path, before, n * (n - 1)
    cli("down", name, check=False)
    if neighbours.record_path().exists():  # never leave the host changed, whatever failed
        neighbours.restore()
    assert _read(V4) == before


def test_a_lab_that_would_overflow_the_table_is_refused_before_anything_exists(big):
    name, path, before, need = big
    res = cli("up", str(path), check=False)
    assert res.returncode == 12
    assert f"needs {need} IPv4 (ARP) neighbour entries" in res.stderr
    assert f"net.ipv4.neigh.default.gc_thresh3 is {before}" in res.stderr
    assert "at least " in res.stderr and "--raise-neigh-limit" in res.stderr
    assert res.stderr.strip().count("\n") == 0
    assert not leftovers(name) and not [n for n in netns.list_names() if n.startswith(name)]
    assert _read(V4) == before and not neighbours.record_path().exists()


def test_the_opt_in_flag_raises_the_limit_and_the_last_down_restores_it(big):
    name, path, before, need = big
    cli("up", str(path), "--raise-neigh-limit", timeout=180)
    assert _read(V4) >= neighbours.fit(need) and neighbours.record_path().exists()
    assert neighbours.in_use()["ipv4"] > before  # the full-mesh reach check really used them
    assert cli("status", name, "--json", check=False).returncode == 0
    cli("down", name)
    assert _read(V4) == before and not neighbours.record_path().exists()


def test_an_up_that_fails_after_raising_the_limit_puts_it_back(big):
    name, path, before, _ = big  # with STP its ports forward after 8 s: a 1 s up rolls back after the raise
    path.write_text(path.read_text().replace(
        "stp: false", "stp: true, forward_delay: 4, hello_time: 1, max_age: 6"))
    res = cli("up", str(path), "--raise-neigh-limit", "--timeout", "1", check=False)
    assert res.returncode == 6 and "did not converge" in res.stderr
    assert not leftovers(name)
    assert _read(V4) == before and not neighbours.record_path().exists()


def test_a_killed_up_still_gets_the_limit_back_at_the_next_down(big):
    name, path, before, _ = big
    proc = subprocess.Popen([ROCELAB, "up", str(path), "--raise-neigh-limit"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_line(proc, "creating", 30)  # the limit is raised, the record written
    proc.send_signal(signal.SIGKILL)  # no rollback at all
    proc.wait(10)
    assert neighbours.record_path().exists()
    cli("down", name)
    poll(lambda: not leftovers(name), timeout=10, what="nothing left")
    assert _read(V4) == before and not neighbours.record_path().exists()
