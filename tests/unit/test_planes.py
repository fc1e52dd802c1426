"""Multi-plane fabrics (`planes: N`) without root: validation, the plan, the plane fault."""

from __future__ import annotations

import pytest
import yaml

from emulator import faults
from emulator.errors import SpecError
from emulator.faults import Fault, FaultKind
from emulator.faults.model import Effect, EffectKind, FaultTargetError
from emulator.lab import load_topology
from emulator.plan import Homing, Kind
from emulator.spec import parse


def _plan(**topo):
    return load_topology({"name": "x", "planes": 2, "spines": 2, "leaves": 2} | topo)[1]


@pytest.fixture(scope="module")
def plan():
    return load_topology("topologies/clos-2p-2x4.yaml")[1]


def test_each_plane_is_its_own_clos_with_its_own_names(plan):
    assert [n.name for n in plan.spines] == ["p0spine1", "p0spine2", "p1spine1", "p1spine2"]
    assert [n.name for n in plan.leaf_nodes] == ["p0leaf1", "p0leaf2", "p1leaf1", "p1leaf2"]
    assert {n.name: n.plane for n in plan.routers} == {
        "p0spine1": 0, "p0spine2": 0, "p1spine1": 1, "p1spine2": 1,
        "p0leaf1": 0, "p0leaf2": 0, "p1leaf1": 1, "p1leaf2": 1}
    assert all(h.plane is None for h in plan.hosts)
    for router in plan.routers:  # no link crosses planes
        assert {plan.node(p.peer).plane for p in router.interfaces if p.fabric} == {router.plane}
    assert plan.shape() == "2 planes of 2 spines x 2 leaves"
    assert [n.name for n in plan.plane_nodes(1)] == ["p1spine1", "p1spine2", "p1leaf1", "p1leaf2"]


def test_every_host_has_nic_k_on_plane_k_and_addresses_in_nic_order(plan):
    assert [h.name for h in plan.hosts] == ["prefill1", "prefill2", "decode1", "decode2"]
    for host in plan.hosts:
        assert host.homing is Homing.RAIL and len(host.interfaces) == 2
        for k, nic in enumerate(host.interfaces):
            assert (nic.name, nic.rail, plan.node(nic.peer).plane) == (f"eth{k}", k, k)
            assert host.addresses[k] == nic.address.split("/")[0]
    assert plan.node("prefill2").leaves == ["p0leaf1", "p1leaf1"]
    assert plan.node("decode1").leaves == ["p0leaf2", "p1leaf2"]
    assert plan.node("decode1").addresses == ["10.2.1.1", "10.2.3.1"]
    routes = {r.dst: r.via for r in plan.node("decode1").routes}
    assert routes == {"0.0.0.0/0": (("10.2.1.0", "eth0"),),  # plane 1's /24s over NIC 1
                      "10.2.2.0/24": (("10.2.3.0", "eth1"),), "10.2.3.0/24": (("10.2.3.0", "eth1"),)}


def test_bgp_and_ecmp_are_per_plane(plan):
    p0 = {h.interfaces[0].address for h in plan.hosts}
    assert len({n.asn for n in plan.leaf_nodes}) == 4  # every leaf its own ASN across planes
    widths = plan.expected_widths()
    assert widths["p0leaf1"] == {"10.2.1.0/31": 2, "10.2.1.2/31": 2}  # its plane's remote hosts
    assert widths["p1spine2"] == {"10.2.2.0/31": 1, "10.2.2.2/31": 1, "10.2.3.0/31": 1,
                                  "10.2.3.2/31": 1}
    assert sorted(plan.fib_prefixes(plan.node("p0spine1"))) == sorted(
        f"{a.rsplit('.', 1)[0]}.{int(a.split('.')[3].split('/')[0]) - 1}/31" for a in p0)
    cut = plan.expected_widths(dead=frozenset({"p1spine1", "p1spine2"}))
    assert cut["p1leaf1"] == {"10.2.3.0/31": 0, "10.2.3.2/31": 0}
    assert cut["p0leaf1"] == widths["p0leaf1"]  # plane 0 untouched


def test_planes_hosts_counts_and_parallel_links():
    plan = _plan(leaves=3, hosts={"per_leaf": 1, "counts": {"p0leaf3": 0},
                                  "roles": {"p0leaf2": "decode"}}, links={"parallel": 2})
    assert [(h.name, h.leaves) for h in plan.hosts] == [
        ("prefill1", ["p0leaf1", "p1leaf1"]), ("decode1", ["p0leaf2", "p1leaf2"])]
    assert [p.name for p in plan.node("p1leaf2").interfaces if p.fabric] == [
        "p1spine1", "p1spine1_2", "p1spine2", "p1spine2_2"]
    eight = load_topology({"name": "x", "planes": 8, "spines": 12, "leaves": 1})[1]
    assert len(eight.spines) == 96 and max(len(n.name) for n in eight.nodes) <= 12
    assert len(eight.hosts[0].interfaces) == 8


def test_one_plane_is_todays_fabric_exactly():
    data = yaml.safe_load(open("topologies/clos-2x4.yaml"))
    one, same = load_topology(dict(data)), load_topology(data | {"planes": 1})
    assert one[2].plan_json == same[2].plan_json
    assert '"plane' not in one[2].plan_json and all(n.plane is None for n in one[1].nodes)


@pytest.mark.parametrize("topo, field, message", [
    ({"planes": 9}, "planes", "less than or equal to 8"),
    ({"planes": 0}, "planes", "greater than or equal to 1"),
    ({"planes": 2, "hosts": {"rails": 2}}, "hosts.rails", "not with planes 2"),
    ({"planes": 2, "hosts": {"dual_homed": True}}, "hosts.dual_homed", "not with planes 2"),
    ({"planes": 2, "fabric": "l2"}, "fabric", "not with planes 2"),
    ({"planes": 3, "pods": 2, "superspines": 1}, "pods", "not with planes 3"),
    ({"planes": 2, "hosts": {"roles": {"leaf1": "decode"}}}, "hosts.roles.leaf1",
     "no such leaf; leaves are p0leaf1..p0leaf4 \\(plane 0's"),
    ({"planes": 2, "hosts": {"counts": {"p1leaf1": 0}}}, "hosts.counts.p1leaf1", "no such leaf"),
])
def test_bad_planes_are_one_error_naming_the_field(topo, field, message):
    with pytest.raises(SpecError, match=f"{field}: .*{message}") as e:
        load_topology({"name": "x"} | topo)
    assert "\n" not in str(e.value)


def test_planes_is_in_the_schema():
    assert parse({"name": "x", "planes": 4}).planes == 4


def test_a_plane_fault_is_every_spine_of_the_plane(plan):
    fault = faults.plane_fault(plan, "1")
    assert fault == Fault(FaultKind.PLANE, "1") and fault.name == "plane 1"
    down = faults.effects_of(plan, fault)
    assert down == {Effect(EffectKind.DOWN, node, port) for s in ("p1spine1", "p1spine2")
                    for leaf in ("p1leaf1", "p1leaf2") for node, port in ((s, leaf), (leaf, s))}
    silent = faults.effects_of(plan, faults.plane_fault(plan, 1, silent=True))
    assert {e.kind for e in silent} == {EffectKind.DROP} and len(silent) == 8
    after = faults.after_state(plan, [fault])
    assert after["failed_nodes"] == ["p1spine1", "p1spine2"]
    assert len(after["cut_links"]) == 4 and after["faults"] == ["plane 1"]
    record = fault.to_json()
    assert record == {"fault": "plane", "plane": 1, "silent": False}
    assert Fault.from_json(record) == fault and fault.same_target(faults.plane_fault(plan, 1, True))


@pytest.mark.parametrize("k", ["2", "-1", "one", "1.0", ""])
def test_a_bad_plane_names_the_field_and_the_range(plan, k):
    with pytest.raises(FaultTargetError, match=r"^plane: .* planes are 0\.\.1$"):
        faults.plane_fault(plan, k)


def test_a_single_plane_lab_has_no_plane_to_fail():
    one = load_topology("topologies/clos-2x4.yaml")[1]
    with pytest.raises(FaultTargetError, match="plane: lab clos-2x4 has one plane"):
        faults.plane_fault(one, 0)


def test_experiment_plane_actions_parse(plan):
    verb, what, fault = faults.parse_action(plan, {"fail": "plane", "plane": 0, "silent": True})
    assert (verb, what, fault) == ("fail", "plane", Fault(FaultKind.PLANE, "0", silent=True))
    assert faults.parse_action(plan, {"heal": "plane", "plane": 0})[2] == Fault(FaultKind.PLANE, "0")
    with pytest.raises(faults.FaultError, match="fail plane: missing key 'plane'"):
        faults.parse_action(plan, {"fail": "plane"})
    with pytest.raises(faults.FaultError, match="plane: '5' is not a plane .* planes are 0..1"):
        faults.parse_action(plan, {"fail": "plane", "plane": 5})
    with pytest.raises(faults.FaultError, match="unknown keys \\['node'\\]"):
        faults.parse_action(plan, {"fail": "plane", "plane": 0, "node": "x"})


def test_plane_nodes_and_kind_on_one_plane():
    one = load_topology("topologies/clos-2x4.yaml")[1]
    assert one.plane_nodes(0) == [] and one.planes == 1
    assert all(n.kind is not Kind.HOST for n in _plan().plane_nodes(0))


def test_reachability_probes_every_nic_of_a_multi_plane_host(plan):
    from emulator.reach import _targets
    targets, of = _targets(plan.hosts, every_nic=True)
    assert targets[of["decode1"][0]] == ("decode1", "10.2.1.1")
    assert targets[of["decode1"][1]] == ("decode1", "10.2.3.1")  # plane 1 checked too
    single, of1 = _targets(plan.hosts, every_nic=False)  # the echo sequence = host index
    assert single == [(h.name, h.address) for h in plan.hosts] and of1["decode1"] == [2]


def test_report_counts_plane_spines_as_spines():
    from emulator.report.data import _spine_bytes
    ports = [{"node": "p1spine2", "tx_bytes": 5}, {"node": "p0leaf1", "tx_bytes": 7},
             {"node": "spine1", "tx_bytes": 3}]
    assert _spine_bytes(ports, {}) == {"p1spine2": 5.0, "spine1": 3.0}


def test_planes_with_numbered_links_host_aggregates_and_bfd():
    plan = _plan(planes=3, leaves=4, addressing="numbered", bgp={"aggregate_hosts": True},
                 bfd={"enabled": True})
    assert plan.shape() == "3 planes of 2 spines x 4 leaves"
    assert plan.hosts[0].addresses == ["10.2.0.1", "10.2.4.1", "10.2.8.1"]
    assert plan.fib_prefixes(plan.node("p1spine2")) == [
        "10.2.4.0/24", "10.2.5.0/24", "10.2.6.0/24", "10.2.7.0/24"]  # plane 1's leaves' /24s
    assert plan.expected_widths()["p2leaf1"] == {
        "10.2.9.0/24": 2, "10.2.10.0/24": 2, "10.2.11.0/24": 2}
