"""Plan invariants over every shipped topology, and render golden files."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from emulator.lab import load_topology
from emulator.plan import Kind
from emulator.spec import Addressing, FabricMode

TOPOLOGIES = sorted(Path("topologies").glob("*.yaml"))
GOLDEN_TOPOLOGIES = ["clos-2x4", "clos-2x4-numbered", "clos-2x4-cc", "clos-2x4-bfd", "l2-2x4",
                     "evpn-2x4"]


@pytest.fixture(params=TOPOLOGIES, ids=lambda p: p.stem)
def plan(request):
    return load_topology(request.param)[1]


def test_names_are_stable_and_simple(plan):
    spines = [n.name for n in plan.of_kind(Kind.SPINE)]
    assert spines == [f"spine{i}" for i in range(1, len(spines) + 1)]
    for node in plan.nodes:
        assert node.netns == f"{plan.lab}-{node.name}"
        for port in node.interfaces:
            assert len(port.name) <= 15  # IFNAMSIZ


def test_every_link_is_symmetric(plan):
    for link in plan.links:
        a, b = plan.node(link.a), plan.node(link.b)
        assert a.interface(link.a_ifname).peer == b.name
        assert b.interface(link.b_ifname).peer == a.name


def test_addresses_unique_and_in_pools(plan):
    seen = set()
    for node in plan.nodes:
        for port in node.interfaces:
            if port.address:
                ip = ipaddress.IPv4Interface(port.address).ip
                assert ip not in seen
                seen.add(ip)
        if node.loopback:
            assert ipaddress.IPv4Address(node.loopback) in ipaddress.IPv4Network(plan.loopback_pool)
    fabric = [p for n in plan.routers for p in n.interfaces if p.fabric]
    if plan.addressing is Addressing.UNNUMBERED:
        assert all(p.address is None for p in fabric)
    else:
        assert all(ipaddress.IPv4Interface(p.address).network.prefixlen == 31 for p in fabric)


def test_rfc7938_asns(plan):
    if plan.fabric is FabricMode.L2:
        assert all(n.asn is None and n.loopback is None for n in plan.routers)
        return
    spines = {n.asn for n in plan.of_kind(Kind.SPINE)}
    leaves = [n.asn for n in plan.of_kind(Kind.LEAF)]
    assert len(spines) == 1 and len(set(leaves)) == len(leaves) and not spines & set(leaves)


def test_roles_and_gateways(plan):
    for host in plan.hosts:
        assert host.role is not None and host.name.startswith(host.role)
        leaf = plan.node(host.leaf)
        if plan.fabric is FabricMode.L3:
            assert leaf.interface(host.name).address.split("/")[0] == host.gateway
        else:  # one segment: the pool's prefix, no gateway, a bridged leaf port
            assert host.gateway is None and leaf.interface(host.name).bridged
            assert host.interfaces[0].address.endswith(f"/{plan.host_pool.split('/')[1]}")


def test_bridged_ports(plan):
    for node in plan.routers:
        bridged = {p.name for p in node.interfaces if p.bridged}
        if plan.fabric is FabricMode.L2:
            assert bridged == {p.name for p in node.interfaces} and node.bridge == "br0"
        elif plan.fabric is FabricMode.EVPN and node.kind is Kind.LEAF:
            assert bridged == {p.name for p in node.interfaces if not p.fabric}
        else:
            assert not bridged and node.bridge is None


def test_stp_tree_blocks_spines_minus_one_times_leaves_minus_one():
    plan = load_topology("topologies/l2-2x4.yaml")[1]
    assert plan.stp_blocked() == [("spine2", "leaf2"), ("spine2", "leaf3"), ("spine2", "leaf4")]
    assert plan.node("spine1").stp_priority < plan.node("spine2").stp_priority \
        < plan.node("leaf1").stp_priority
    bigger = load_topology({"name": "x", "fabric": "l2", "spines": 3, "leaves": 5})[1]
    assert len(bigger.stp_blocked()) == (3 - 1) * (5 - 1)
    leaf_root = load_topology({"name": "x", "fabric": "l2", "l2": {"root": "leaf2"}})[1]
    assert leaf_root.stp_blocked() == [("leaf1", "spine2"), ("leaf3", "spine2"),
                                       ("leaf4", "spine2")]
    no_stp = {"name": "x", "fabric": "l2", "l2": {"stp": False}, "congestion": {"enabled": True}}
    assert load_topology(no_stp)[1].stp_blocked() == []


def test_fib_targets_per_fabric():
    l3 = load_topology("topologies/clos-2x4.yaml")[1]
    evpn = load_topology("topologies/evpn-2x4.yaml")[1]
    l2 = load_topology("topologies/l2-2x4.yaml")[1]
    assert len(l3.fib_prefixes(l3.node("leaf1"))) == 6  # the other leaves' host /31s
    assert evpn.fib_prefixes(evpn.node("leaf1")) == ["10.0.0.4/32", "10.0.0.5/32", "10.0.0.6/32"]
    assert len(evpn.fib_prefixes(evpn.node("spine1"))) == 4
    assert l2.fib_targets() == [] and l2.frr_nodes == []
    assert {evpn.port_mtu(p) for n in evpn.nodes for p in n.interfaces} == {9000, 9050}
    assert {l3.port_mtu(p) for n in l3.nodes for p in n.interfaces} == {9000}


def test_default_topology_roles():
    plan = load_topology("topologies/clos-2x4.yaml")[1]
    by_leaf = {h.name: h.leaf for h in plan.hosts}
    assert by_leaf == {"prefill1": "leaf1", "prefill2": "leaf1", "prefill3": "leaf2",
                       "prefill4": "leaf2", "decode1": "leaf3", "decode2": "leaf3",
                       "decode3": "leaf4", "decode4": "leaf4"}


def test_pure_and_deterministic():
    a = load_topology("topologies/clos-8x16.yaml")[2]
    b = load_topology("topologies/clos-8x16.yaml")[2]
    assert a == b


@pytest.mark.parametrize("stem", GOLDEN_TOPOLOGIES)
def test_golden_render(stem, golden):
    _, plan, rendered = load_topology(f"topologies/{stem}.yaml")
    golden(f"render/{stem}/plan.json", rendered.plan_json)
    for node, files in rendered.files.items():
        for name, text in files.items():
            golden(f"render/{stem}/{node}/{name}", text)


def test_bfd_adds_bfdd_and_profile():
    _, plan, rendered = load_topology("topologies/clos-2x4-bfd.yaml")
    assert plan.bfd_enabled
    leaf = rendered.files["leaf1"]
    assert "bfd profile fabric" in leaf["bgpd.conf"]
    assert "transmit-interval 100" in leaf["bfdd.conf"]


def test_plan_json_round_trips():
    _, plan, rendered = load_topology("topologies/clos-2x4.yaml")
    data = json.loads(rendered.plan_json)
    assert data["lab"] == "clos-2x4" and len(data["nodes"]) == len(plan.nodes)
