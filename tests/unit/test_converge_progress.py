"""What `up` shows while routing converges: the checks count routers converged and what is
missing, and Watch turns each poll into progress (a fake clock: exact, no wall clock)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from emulator import converge
from emulator import progress as pg
from emulator.plan import compile_plan
from emulator.polled import CheckResult, Watch, counted
from emulator.spec import load

TOPO = Path(__file__).resolve().parents[2] / "topologies" / "clos-2x4.yaml"


@pytest.fixture(scope="module")
def plan():
    return compile_plan(load(TOPO), str(TOPO))


def test_the_fib_check_counts_routers_converged_and_prefixes_missing(plan, monkeypatch):
    widths = {n.name: dict(plan.expected_widths()[n.name]) for n in plan.frr_nodes}
    widths["leaf1"]["10.2.2.0/31"] = 1  # one path of two
    widths["leaf2"] = {p: 0 for p in widths["leaf2"]}  # nothing learnt yet: 6 missing
    monkeypatch.setattr(converge, "fib_widths", lambda _: widths)
    c = converge.check_fib(plan)
    assert (c.ok, c.done, c.total, c.missing) == (False, 4, 6, 7)


def test_the_bgp_check_counts_sessions_missing(plan, monkeypatch):
    up = {"state": "Established", "prefixes": 1}
    read: dict = {n.name: {f"p{i}": up for i in range(sum(i.fabric for i in n.interfaces))}
                  for n in plan.frr_nodes}
    read["spine1"] = {f"p{i}": up for i in range(3)}  # 3 of its 4 leaves
    read["leaf4"] = "no bgpd"
    monkeypatch.setattr(converge, "read_sessions", lambda _: read)
    c = converge.check_bgp(plan)
    assert (c.ok, c.done, c.total, c.missing) == (False, 4, 6, 1 + 2)  # leaf4 unread: both of its


def test_counted_names_what_each_failing_check_misses_and_the_first_problem():
    checks = [CheckResult("fib", True), CheckResult("bgp", False, ["leaf4: no bgpd", "x"], 4, 6, 3)]
    assert counted(checks) == "bgp: 3 sessions not Established; e.g. leaf4: no bgpd"


class Clock:
    t = 100.0

    def __call__(self) -> float:
        return self.t


def test_watch_shows_routers_converged_with_an_eta_then_pairs_answered(plan):
    clock, out = Clock(), io.StringIO()
    r = pg.Reporter(out, tty=False, every_s=5.0, clock=clock, keep_alive=False)
    watch = Watch(plan, r)  # the routing phase starts with the wait, before the first poll
    for done in (0, 1, 2, 3):  # a poll every 3 s
        clock.t += 3
        watch.polled([CheckResult("fib", False, ["leaf2: 6 prefixes not at the expected width"],
                                  done, 6, 6 * (6 - done))])
    watch.converged()
    for done in (20, 56):
        watch.answered(done, 56)
    clock.t += 6
    watch.reached(CheckResult("reach", True, [], 56, 56))
    assert out.getvalue().splitlines() == [
        "[   6.0s] routing: 1/6 routers converged (16%), 6 s, ETA 15 s, fib: 30 prefixes missing; "
        "e.g. leaf2: 6 prefixes not at the expected width",
        "[  12.0s] routing: 3/6 routers converged (50%), 12 s, ETA 9 s, fib: 18 prefixes missing; "
        "e.g. leaf2: 6 prefixes not at the expected width",
        "[  12.0s] routing: 6/6 routers converged (100%), in 12 s",
        "[  12.0s] routing converged; checking host reachability",
        "[  18.0s] reach: 56/56 host pairs answered (100%), in 6 s"]


def test_routing_falls_back_after_reach_failed_and_counts_again(plan):
    seen: list[str] = []
    watch = Watch(plan, seen.append)
    watch.converged()
    watch.answered(50, 56)
    watch.reached(CheckResult("reach", False, ["h1 cannot reach h2"], 50, 56, 6))
    watch.polled([CheckResult("fib", False, ["leaf1: 1 prefixes ..."], 5, 6, 1)])
    assert seen[-2] == ("reach: 50/56 host pairs answered (89%), in 0 s, "
                        "reach: 6 host pairs unanswered; e.g. h1 cannot reach h2")
    assert seen[-1] == ("routing: 5/6 routers converged (83%), 0 s, fib: 1 prefixes missing; "
                        "e.g. leaf1: 1 prefixes ...")
