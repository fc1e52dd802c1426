"""Faults without root: targets, effects, what routing must converge to, and when it did."""

from __future__ import annotations

import pytest

from emulator import converge, faults
from emulator.faults import Fault, FaultError, FaultKind, impact, inject, recovery
from emulator.faults.effects import _ruleset
from emulator.faults.model import Effect, EffectKind
from emulator.lab import load_topology
from emulator.units import parse_duration

DOWN, DROP = EffectKind.DOWN, EffectKind.DROP


@pytest.fixture(scope="module")
def plan():
    return load_topology("topologies/clos-2x4.yaml")[1]


def test_link_fault_goes_down_on_the_router_end(plan):
    assert faults.link_fault(plan, "leaf1", "spine2") == Fault(FaultKind.LINK, "leaf1", "spine2")
    assert faults.link_fault(plan, "spine2", "leaf1").a == "spine2"
    host_first = faults.link_fault(plan, "prefill1", "leaf1")  # a host never loses its own eth0
    assert (host_first.a, host_first.b) == ("leaf1", "prefill1")
    assert faults.link_fault(plan, "leaf1", "spine2").same_target(
        faults.link_fault(plan, "spine2", "leaf1", silent=True))


@pytest.mark.parametrize("a, b, message", [
    ("leaf1", "leaf2", "no link leaf1-leaf2; leaf1 is linked to spine1, spine2, prefill1, prefill2"),
    ("leaf9", "spine1", "no node 'leaf9'"),
])
def test_bad_link_names_the_choices(plan, a, b, message):
    with pytest.raises(FaultError, match=message):
        faults.link_fault(plan, a, b)


def test_a_host_is_not_a_node_fault(plan):
    with pytest.raises(FaultError, match="prefill1 is a host: fail its link instead"):
        faults.node_fault(plan, "prefill1")


def test_effects_of_each_fault(plan):
    assert faults.effects_of(plan, faults.link_fault(plan, "leaf1", "spine2")) == {
        Effect(DOWN, "leaf1", "spine2"), Effect(DOWN, "spine2", "leaf1")}
    assert faults.effects_of(plan, faults.link_fault(plan, "decode1", "leaf3")) == {
        Effect(DOWN, "leaf3", "decode1")}  # never the host's own eth0
    assert faults.effects_of(plan, faults.link_fault(plan, "leaf1", "spine2", silent=True)) == {
        Effect(DROP, "leaf1", "spine2"), Effect(DROP, "spine2", "leaf1")}
    assert faults.effects_of(plan, faults.link_fault(plan, "decode1", "leaf3", silent=True)) == {
        Effect(DROP, "leaf3", "decode1"), Effect(DROP, "decode1", "eth0")}
    node = faults.effects_of(plan, faults.node_fault(plan, "spine2"))
    assert node == ({Effect(DOWN, "spine2", f"leaf{i}") for i in range(1, 5)}
                    | {Effect(DOWN, f"leaf{i}", "spine2") for i in range(1, 5)})
    assert len(faults.effects_of(plan, faults.node_fault(plan, "leaf1", silent=True))) == 8
    assert len(faults.effects_of(plan, faults.node_fault(plan, "leaf1"))) == 6  # hosts keep eth0 up


def test_silent_host_link_keeps_its_route_carrier_loss_does_not(plan):
    silent = faults.after_state(plan, [faults.link_fault(plan, "leaf3", "decode1", silent=True)])
    carrier = faults.after_state(plan, [faults.link_fault(plan, "leaf3", "decode1")])
    assert silent["cut_links"] == [] and carrier["cut_links"] == [["decode1", "leaf3"]]
    node = faults.after_state(plan, [faults.node_fault(plan, "spine2", silent=True)])
    assert node["failed_nodes"] == ["spine2"] and len(node["cut_links"]) == 4


def _widths(exp, router):
    return set(exp[router].values())


def test_expected_fib_whole_fabric(plan):
    exp = recovery.expected_fib(plan, {})
    assert all(_widths(exp, f"leaf{i}") == {2} for i in range(1, 5))
    assert _widths(exp, "spine1") == {1} and len(exp["spine1"]) == 8 and len(exp["leaf1"]) == 6


def test_expected_fib_after_an_uplink_cut(plan):
    exp = recovery.expected_fib(plan, {"cut_links": [["leaf1", "spine2"]]})
    assert _widths(exp, "leaf1") == {1}
    leaf1_hosts = {plan.host_prefix(plan.node(h)) for h in ("prefill1", "prefill2")}
    for other in ("leaf2", "leaf3", "leaf4"):
        assert {p: w for p, w in exp[other].items() if p in leaf1_hosts} == dict.fromkeys(leaf1_hosts, 1)
        assert {w for p, w in exp[other].items() if p not in leaf1_hosts} == {2}
    assert {p for p, w in exp["spine2"].items() if w == 0} == leaf1_hosts


def test_expected_fib_after_spine_and_leaf_failures(plan):
    spine = recovery.expected_fib(plan, faults.after_state(plan, [faults.node_fault(plan, "spine2")]))
    assert "spine2" not in spine and all(_widths(spine, f"leaf{i}") == {1} for i in range(1, 5))
    leaf = recovery.expected_fib(plan, faults.after_state(plan, [faults.node_fault(plan, "leaf4")]))
    gone = {plan.host_prefix(h) for h in plan.hosts if h.leaf == "leaf4"}
    assert "leaf4" not in leaf and all(leaf["leaf1"][p] == 0 for p in gone)
    host = recovery.expected_fib(plan, {"cut_links": [["decode1", "leaf3"]]})
    assert host["leaf1"][plan.host_prefix(plan.node("decode1"))] == 0


def _sample(t, router, width, plan):
    return (t, router, dict.fromkeys(plan.fib_prefixes(plan.node(router)), width))


def test_convergence_detect_settle_and_relapse(plan):
    full = recovery.expected_fib(plan, {})
    samples = [(0.0, r, w) for r, w in full.items()]
    event = {"action": "fail", "name": "node spine2", "monotonic": 10.0,
             "after": faults.after_state(plan, [faults.node_fault(plan, "spine2")])}
    samples += [_sample(10.05, "leaf1", 1, plan), _sample(10.07, "leaf2", 1, plan),
                _sample(10.08, "leaf3", 1, plan), _sample(10.09, "leaf4", 1, plan),
                _sample(10.20, "leaf4", 2, plan), _sample(10.30, "leaf4", 1, plan)]
    conv = recovery.convergence(samples, event, plan)
    assert conv["detect_s"] == 0.05 and conv["converge_s"] == 0.3 and conv["settled"]
    assert conv["leaf_ecmp"]["leaf4"] == [1, 1] and "spine2" not in conv["routers_changed"]
    early = recovery.convergence(samples, event, plan, until=10.25)  # relapsed at 10.20
    assert early["settled"] is False and early["converge_s"] is None


def test_convergence_when_nothing_has_to_change(plan):
    full = recovery.expected_fib(plan, {})
    samples = [(0.0, r, w) for r, w in full.items()]
    event = {"action": "heal", "target": "all", "monotonic": 5.0, "after": {}}
    conv = recovery.convergence(samples, event, plan)
    assert conv == conv | {"detect_s": None, "converge_s": 0.0, "settled": True}


def test_unrecorded_effects_are_named_as_faults(plan):
    node = faults.effects_of(plan, faults.node_fault(plan, "spine1"))
    silent = faults.effects_of(plan, faults.link_fault(plan, "leaf2", "spine2", silent=True))
    live = inject._live(plan, {"active": []}, node | silent | {Effect(DOWN, "leaf4", "decode4")})
    assert [(r["fault"], r.get("node") or (r["a"], r["b"]), r["silent"], r["recorded"])
            for r in live] == [("node", "spine1", False, False),
                               ("link", ("leaf4", "decode4"), False, False),
                               ("link", ("leaf2", "spine2"), True, False)]


def test_records_only_count_while_their_effects_are_in_force(plan):
    rec = faults.link_fault(plan, "leaf1", "spine1").to_json() | {"time": 1.0}
    assert inject._live(plan, {"active": [rec]}, set()) == []
    both = {Effect(DOWN, "leaf1", "spine1"), Effect(DOWN, "spine1", "leaf1")}
    assert inject._live(plan, {"active": [rec]}, both) == [rec]
    assert inject._live(plan, {"active": [rec]}, both - {Effect(DOWN, "spine1", "leaf1")}) == [
        faults.link_fault(plan, "leaf1", "spine1").to_json() | {"recorded": False, "time": None}]


@pytest.mark.parametrize("action, message", [
    ({"fail": "link", "a": "leaf1"}, "fail link: missing key 'b'"),
    ({"fail": "link", "a": "leaf1", "b": "spine1", "mode": "x"}, r"unknown keys \['mode'\]"),
    ({"fail": "all"}, "fail: 'all' is not one of link, node, plane, flap"),
    ({"heal": "flap"}, "heal: 'flap' is not one of link, node, plane, all"),
    ({"fail": "node", "heal": "node", "node": "spine1"}, "exactly one of `fail` or `heal`"),
    ({"fail": "flap", "a": "leaf1", "b": "spine1", "period": "soon"}, "not a duration"),
])
def test_bad_actions_are_one_clear_error(plan, action, message):
    with pytest.raises(FaultError, match=message):
        faults.apply(plan, action)


@pytest.mark.parametrize("text, seconds", [("2s", 2.0), ("500ms", 0.5), ("1.5", 1.5), (3, 3.0)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


def test_drop_ruleset_is_one_ingress_chain_per_port():
    text = _ruleset([Effect(DROP, "leaf1", "spine2"), Effect(DROP, "leaf1", "eth0")])
    assert text.startswith("table netdev rocelab_fault {")
    assert 'chain in_spine2 {\n  type filter hook ingress device "spine2"' in text
    assert text.count("counter drop") == 2


def test_heal_action_and_report_table():
    assert impact.heal_action({"fail": "link", "a": "leaf1", "b": "spine2", "silent": True}) == {
        "heal": "link", "a": "leaf1", "b": "spine2"}
    table = impact.report_table({"carrier": {"summary": {"converge_s": 0.13, "flows_failed": 0}}})
    assert table.splitlines()[2].startswith("| carrier | - | 0.13 |")


@pytest.mark.parametrize("entry, elapsed, heard", [
    ({"bgpState": "Established", "bgpTimerLastRead": 0}, 1.0, True),
    ({"bgpState": "Established", "bgpTimerLastRead": 2000}, 3.5, True),
    ({"bgpState": "Established", "bgpTimerLastRead": 2000}, 2.5, False),  # 1 s clock: maybe before
    ({"bgpState": "Established", "bgpTimerLastRead": 5000}, 2.0, False),  # last read before heal
    ({"bgpState": "Active", "bgpTimerLastRead": 0}, 9.0, False),
    ({}, 9.0, False),
])
def test_a_session_has_heard_its_peer_only_when_the_read_is_provably_after(entry, elapsed, heard):
    assert converge.heard_since(entry, elapsed) is heard


# -- gray link faults (issue 16) --------------------------------------------------------------

def test_a_gray_fault_degrades_both_ends_and_cuts_nothing():
    from emulator.faults.model import after_state, effects_of, link_fault
    plan = load_topology("topologies/clos-2x4.yaml")[1]
    f = link_fault(plan, "prefill1", "leaf1", loss_pct=1.5, rate_bps=100_000_003)
    assert (f.a, f.b, f.gray) == ("leaf1", "prefill1", True)  # leaf first; rate in whole bytes
    assert effects_of(plan, f) == {
        Effect(EffectKind.LOSS, "leaf1", "prefill1", "1.5"),
        Effect(EffectKind.LOSS, "prefill1", "eth0", "1.5"),
        Effect(EffectKind.RATE, "leaf1", "prefill1", "100000000"),
        Effect(EffectKind.RATE, "prefill1", "eth0", "100000000")}
    assert after_state(plan, [f])["cut_links"] == []
    assert f.describe() == "link leaf1-prefill1 (loss 1.5%, rate 100 Mbit/s)"
    assert type(f).from_json(f.to_json()) == f


@pytest.mark.parametrize("kwargs, message", [
    ({"loss": "0%"}, "loss: must be above 0%"), ({"corrupt": "101"}, "corrupt: must be above 0%"),
    ({"rate": "1 lightyear"}, "rate:"), ({"loss": "abc"}, "loss: .*abc.* is not a percentage")])
def test_gray_arguments_are_checked_naming_the_field(kwargs, message):
    from emulator.faults.model import FaultError, gray_args
    with pytest.raises(FaultError, match=message):
        gray_args(**({"loss": None, "corrupt": None, "rate": None} | kwargs))


def test_gray_faults_refuse_silent():
    from emulator.faults.model import FaultError, link_fault
    plan = load_topology("topologies/clos-2x4.yaml")[1]
    with pytest.raises(FaultError, match="silent:"):
        link_fault(plan, "leaf1", "spine1", silent=True, loss_pct=1)


def test_a_shaped_labs_gray_rate_is_real_equivalent_and_dilated_like_its_links():
    """Issue 24 (11): a gray --rate on a shaped lab was refused, so the gray demo ran on an
    unshaped lab, whose clean window runs at the CPU's speed. It is now taken in the
    topology's real units (400G links at D = 4000): 100G shapes each end at 25 Mbit/s."""
    from emulator.faults.model import EffectKind, effects_of, link_fault, real_rate
    shaped = load_topology("topologies/clos-2x4-cc.yaml")[1]
    assert shaped.dilation == 4000
    f = link_fault(shaped, "leaf1", "spine1", rate_bps=100 * 10**9, loss_pct=1)
    rates = {(e.node, e.port): e.value for e in effects_of(shaped, f) if e.kind is EffectKind.RATE}
    assert rates == {("leaf1", "spine1"): "25000000", ("spine1", "leaf1"): "25000000"}
    assert real_rate(shaped, 25_000_000) == f.rate_bps
    plain = load_topology("topologies/clos-2x4.yaml")[1]  # unshaped: D = 1, as given
    f = link_fault(plain, "leaf1", "spine1", rate_bps=400 * 10**6)
    assert {e.value for e in effects_of(plain, f) if e.kind is EffectKind.RATE} == {"400000000"}


@pytest.mark.parametrize("topology", ["topologies/clos-2x4.yaml", "topologies/clos-2x4-cc.yaml"])
def test_an_unrecorded_gray_rate_is_named_from_the_kernel_as_it_was_given(topology):
    """`status` and `heal --all` name a rate no record explains from its kernel value (wall
    bit/s); that value used to go through the speed parser ("400000000" is not a rate)."""
    from emulator.faults.model import link_fault
    plan = load_topology(topology)[1]
    f = link_fault(plan, "leaf1", "spine1", rate_bps=50 * 10**9 if plan.congestion else 10**8)
    (derived,) = inject._derive(plan, faults.effects_of(plan, f))
    assert derived.rate_bps == f.rate_bps
    assert faults.effects_of(plan, derived) == faults.effects_of(plan, f)


@pytest.mark.parametrize("rate, message", [
    (400 * 10**9, r"rate: below the link's speed 400G on shaped lab"),
    (10**7, r"rate: at least 32M on lab .*dilation 4000"),
])
def test_a_shaped_labs_gray_rate_must_slow_the_link_and_still_move(rate, message):
    from emulator.faults.model import FaultError, link_fault
    shaped = load_topology("topologies/clos-2x4-cc.yaml")[1]
    with pytest.raises(FaultError, match=message):
        link_fault(shaped, "leaf1", "spine1", rate_bps=rate)


def test_an_experiment_action_can_degrade_a_link():
    from emulator.faults import parse_action
    plan = load_topology("topologies/clos-2x4.yaml")[1]
    verb, what, f = parse_action(plan, {"fail": "link", "a": "leaf1", "b": "spine1", "corrupt": "0.5%"})
    assert (verb, what, f.corrupt_pct) == ("fail", "link", 0.5)


def test_chain_effects_are_read_back_with_their_share_and_counters():
    from emulator.faults.effects import parse_chains
    loss = Effect(EffectKind.LOSS, "leaf1", "spine1", "2")
    assert 'numgen random mod 1000000 < 20000 counter drop comment "2"' in _ruleset([loss])
    corrupt = _ruleset([Effect(EffectKind.CORRUPT, "leaf1", "spine1", "0.5")])
    assert "udp dport 4791" in corrupt and "@th,80,16 set 0x0" in corrupt and "< 5000" in corrupt
    items = [{"chain": {"name": "loss_spine1"}}, {"chain": {"name": "in_spine2"}},
             {"rule": {"chain": "loss_spine1", "comment": "2",
                       "expr": [{"counter": {"packets": 7, "bytes": 1}}, {"drop": None}]}},
             {"rule": {"chain": "in_spine2", "expr": [{"counter": {"packets": 3, "bytes": 1}}]}},
             {"chain": {"name": "other"}}]
    assert parse_chains("leaf1", items) == {loss: 7, Effect(EffectKind.DROP, "leaf1", "spine2"): 3}
