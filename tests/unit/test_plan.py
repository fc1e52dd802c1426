"""Plan invariants over every shipped topology, and render golden files."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from emulator.lab import load_topology
from emulator.plan import Kind
from emulator.spec import Addressing

TOPOLOGIES = sorted(Path("topologies").glob("*.yaml"))
GOLDEN_TOPOLOGIES = ["clos-2x4", "clos-2x4-numbered", "clos-2x4-cc", "clos-2x4-bfd"]


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
    spines = {n.asn for n in plan.of_kind(Kind.SPINE)}
    leaves = [n.asn for n in plan.of_kind(Kind.LEAF)]
    assert len(spines) == 1 and len(set(leaves)) == len(leaves) and not spines & set(leaves)


def test_roles_and_gateways(plan):
    for host in plan.hosts:
        assert host.role is not None and host.name.startswith(host.role.value)
        leaf = plan.node(host.leaf)
        assert leaf.interface(host.name).address.split("/")[0] == host.gateway


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
