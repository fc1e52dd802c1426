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
                     "evpn-2x4", "clos-3tier", "rail-4x8", "clos-2x4-dual", "clos-2x4-custom",
                     "explicit-3node", "clos-2p-2x4"]


@pytest.fixture(params=TOPOLOGIES, ids=lambda p: p.stem)
def plan(request):
    return load_topology(request.param)[1]


def test_names_are_stable_and_simple(plan):
    spines = [n.name for n in plan.of_kind(Kind.SPINE)]
    per_plane = len(spines) // plan.planes
    assert spines == ([f"spine{i}" for i in range(1, len(spines) + 1)] if plan.planes == 1 else
                      [f"p{k}spine{i}" for k in range(plan.planes) for i in range(1, per_plane + 1)])
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
        if node.loopback:  # a router's id, or a dual-homed host's own /32
            pool = plan.loopback_pool if node.is_router else plan.host_pool
            assert ipaddress.IPv4Address(node.loopback) in ipaddress.IPv4Network(pool)
            assert ipaddress.IPv4Address(node.loopback) not in seen
            seen.add(ipaddress.IPv4Address(node.loopback))
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
    assert len(spines) == (plan.pods or 1)  # one per pod
    assert len(set(leaves)) == len(leaves) and not spines & set(leaves)


def test_roles_and_gateways(plan):
    for host in plan.hosts:
        assert host.role is not None
        assert host.name.startswith(host.role) or plan.lab.startswith("explicit")
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


# -- the fabric model: 3-tier, rails, dual homing, parallel links, explicit, overrides --------

def _plan(doc):
    return load_topology(doc)[1]


def test_three_tier_asns_names_and_ecmp_at_every_tier():
    plan = _plan("topologies/clos-3tier.yaml")
    assert [n.name for n in plan.of_kind(Kind.SUPERSPINE)] == ["super1", "super2"]
    assert {n.name: (n.pod, n.asn) for n in plan.spines} == {
        "spine1": (1, 65000), "spine2": (1, 65000), "spine3": (2, 65001), "spine4": (2, 65001)}
    assert {n.asn for n in plan.of_kind(Kind.SUPERSPINE)} == {64900}
    assert len({n.asn for n in plan.leaf_nodes}) == 4
    assert plan.node("spine1").ports_to("super1") and not plan.node("spine1").ports_to("leaf3")
    widths = plan.expected_widths()
    prefill1, decode1 = (plan.host_prefix(plan.node(h)) for h in ("prefill1", "decode1"))
    assert widths["leaf1"][decode1] == 2  # both pod spines
    assert widths["spine1"][decode1] == 2  # both superspines
    assert widths["spine1"][plan.host_prefix(plan.node("prefill3"))] == 1  # in its pod: the leaf
    assert widths["super1"][prefill1] == 2  # both spines of pod 1
    # A superspine failure halves the cross-pod width at the spines, not at the leaves.
    cut = plan.expected_widths(dead=frozenset({"super1"}))
    assert cut["spine1"][decode1] == 1 and cut["leaf1"][decode1] == 2
    assert plan.oversubscription()["leaf1"] == 0.5  # 2 x 400G hosts under 2 x 800G uplinks


def test_a_spine_never_routes_through_another_spine_of_its_asn():
    plan = _plan("topologies/clos-2x4.yaml")
    cut = plan.expected_widths(cut=frozenset({frozenset(("spine1", "leaf3"))}))
    decode1 = plan.host_prefix(plan.node("decode1"))
    assert cut["spine1"][decode1] == 0  # leaf1 -> spine2 -> leaf3 carries AS 65000 twice
    assert cut["leaf1"][decode1] == 1 and cut["spine2"][decode1] == 1


def test_rail_hosts_have_a_nic_per_rail_leaf_and_route_by_rail():
    plan = _plan("topologies/rail-4x8.yaml")
    host = plan.node("prefill1")
    assert [p.name for p in host.interfaces] == ["eth0", "eth1", "eth2", "eth3"]
    assert host.leaves == ["leaf1", "leaf2", "leaf3", "leaf4"]
    assert plan.node("decode1").leaves == ["leaf5", "leaf6", "leaf7", "leaf8"]
    assert len(host.addresses) == 4 and host.address == host.addresses[0]
    routes = {r.dst: r.via for r in host.routes}
    assert routes["0.0.0.0/0"][0][1] == "eth0"
    assert routes["10.2.6.0/24"][0][1] == "eth2"  # leaf7's hosts: rail 2, over NIC 2
    assert sorted(plan.fib_prefixes(plan.node("leaf1")))[:1] and \
        len(plan.fib_prefixes(plan.node("spine1"))) == 16  # a /31 per NIC


def test_dual_homed_hosts_one_address_two_leaves():
    plan = _plan("topologies/clos-2x4-dual.yaml")
    host = plan.node("prefill1")
    assert host.leaves == ["leaf1", "leaf2"] and host.address == host.loopback
    (default,) = host.routes
    assert default.dst == "0.0.0.0/0" and [dev for _, dev in default.via] == ["eth0", "eth1"]
    for leaf in ("leaf1", "leaf2"):
        assert f"{host.address}/32" in dict(plan.node(leaf).static_routes)
    prefix = f"{host.address}/32"
    assert plan.expected_widths()["spine1"][prefix] == 2  # announced by both leaves
    one_left = plan.expected_widths(dead=frozenset({"leaf1"}))
    assert one_left["spine1"][prefix] == 1 and one_left["leaf3"][prefix] == 2


def test_parallel_links_per_tier_speeds_roles_and_overrides():
    plan = _plan("topologies/clos-2x4-custom.yaml")
    leaf1 = plan.node("leaf1")
    assert [p.name for p in leaf1.ports_to("spine1")] == ["spine1", "spine1_2"]
    assert {p.speed_bps for p in leaf1.interfaces if p.fabric} == {800_000_000_000}
    assert plan.node("leaf3").interface("spine2").speed_bps == 400_000_000_000  # per_link
    assert not plan.hosts_of("leaf4") and [h.name for h in plan.hosts_of("leaf3")] == \
        ["storage1", "storage2"]
    assert plan.expected_widths()["leaf3"][plan.host_prefix(plan.node("prefill1"))] == 4
    assert set(plan.expected_widths()["leaf4"].values()) == {2}  # maximum_paths 2
    spine = plan.node("spine1")
    assert spine.ecmp_hash.value == "l3" and (spine.bgp_keepalive, spine.bgp_hold) == (1, 3)
    assert leaf1.bfd and leaf1.bfd_interval_ms == 300 and not plan.node("leaf3").bfd


def test_node_override_beats_group_beats_role():
    doc = {"name": "x", "groups": {"g": ["leaf1", "leaf2"]},
           "overrides": {"leaf": {"bgp": {"maximum_paths": 8}, "frr": "! role\n"},
                         "g": {"bgp": {"maximum_paths": 4}, "frr": "! group\n"},
                         "leaf1": {"bgp": {"maximum_paths": 2}, "frr": "! node"}}}
    plan = _plan(doc)
    assert [plan.node(f"leaf{i}").maximum_paths for i in (1, 2, 3)] == [2, 4, 8]
    assert plan.node("leaf1").frr_snippet == "! role\n! group\n! node\n"
    assert plan.node("spine1").frr_snippet == ""


def test_explicit_nodes_and_links():
    plan = _plan("topologies/explicit-3node.yaml")
    assert [n.name for n in plan.routers] == ["spine1", "leaf1", "leaf2"]
    assert plan.node("db1").homing.value == "dual" and plan.node("db1").role == "storage"
    assert plan.node("leaf1").ports_to("leaf2")
    decode1 = plan.host_prefix(plan.node("decode1"))
    assert plan.expected_widths()["leaf1"][decode1] == 1  # the direct leaf-leaf link


def test_ecmp_hash_sysctls_follow_the_node():
    from emulator.realize import hash_sysctls
    plan = _plan("topologies/clos-2x4-custom.yaml")
    assert hash_sysctls(plan.node("spine1"))["net/ipv4/fib_multipath_hash_policy"] == "0"
    assert hash_sysctls(plan.node("leaf1"))["net/ipv4/fib_multipath_hash_policy"] == "1"


def test_an_mtu_override_changes_only_the_nodes_own_ends():
    plan = _plan({"name": "x", "overrides": {"leaf1": {"mtu": 4200}, "host": {"mtu": 8000}}})
    leaf1 = plan.node("leaf1")
    assert {p.mtu for p in leaf1.interfaces} == {4200}
    assert plan.node("spine1").interface("leaf1").mtu == 9000  # a mismatch, on purpose
    assert plan.node("prefill1").interfaces[0].mtu == 8000 and plan.mtu == 8000
