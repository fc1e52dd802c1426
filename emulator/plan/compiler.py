"""Plan compiler: a validated Topology -> a frozen, fully resolved Plan.

Pure and deterministic (no root, no I/O): every name, address, ASN and
interface of the lab is decided here, so render, realize, status and tests
all read the same facts. Semantic problems the schema cannot express (a
role for a leaf that does not exist, a pool too small) are SpecErrors that
name the field.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ..errors import SpecError
from ..spec import Addressing, FabricMode, HostKind, Topology
from ..units import parse_speed
from . import addresses, knobs, skeleton
from .checks import check_topology
from .congestion import CongestionPlan
from .congestion import resolve as resolve_congestion
from .kinds import Kind
from .nodes import Interface, L2Plan, Link, Node
from .records import Plan
from .skeleton import SkNode

STP_PRIORITY_ROOT, STP_PRIORITY_SPINE, STP_PRIORITY_LEAF = 4096, 8192, 32768


def compile_plan(topo: Topology, source: str = "<topology>") -> Plan:
    """The table of contents of planning: a skeleton, then numbers, then wiring."""
    check_topology(topo, source)  # what the schema cannot say: timers, tiers, pools
    sk = skeleton.build(topo, source)  # nodes and links: the file's own, or a generated Clos
    if not sk.nodes:
        raise SpecError(source, "nodes", "must name at least one node")
    node_knobs = knobs.resolve_overrides(topo, source, sk)  # role < group < node
    routed = topo.fabric is not FabricMode.L2
    routers = [n.name for n in sk.nodes if n.kind is not Kind.HOST]
    asns = knobs.asns(topo, source, sk, node_knobs) if routed else {}  # RFC 7938
    loopbacks = addresses.loopbacks(topo, source, routers) if routed else {}
    ifs, links = addresses.wire(topo, source, sk, node_knobs)  # ports, veths, fabric /31s
    host_info = (addresses.segment_addresses if topo.fabric is not FabricMode.L3  # one segment
                 else addresses.host_addresses)(topo, source, sk, ifs)
    nodes = _nodes(topo, sk, ifs, node_knobs, {"asn": asns, "loopback": loopbacks}, host_info)
    nodes = _host_kinds(topo, source, _number_ports(nodes))  # port ids, then engine or rxe
    congestion = resolve_congestion(topo, source, set(routers), {h.name for h in sk.of(Kind.HOST)},
                                    max(link.speed_bps for link in links))
    aggregates = tuple((leaf, info["aggregate"]) for leaf, info in host_info.items()
                       if "aggregate" in info)  # bgp.aggregate_hosts: a /24 per leaf
    return _plan(topo, source, nodes, links, congestion, aggregates)


def _nodes(topo: Topology, sk: skeleton.Skeleton, ifs: dict[str, list[Interface]],
           node_knobs: dict[str, dict[str, Any]], numbers: dict[str, dict[str, Any]],
           host_info: dict[str, dict[str, Any]]) -> list[Node]:
    """Every node's record: its ports, numbers, knobs and (hosts) addresses and routes."""
    routed = topo.fabric is not FabricMode.L2
    counters: dict[Kind, int] = {}
    nodes = []
    for n in sk.nodes:
        counters[n.kind] = counters.get(n.kind, 0) + 1
        k = node_knobs[n.name]
        info = host_info.get(n.name, {})
        nodes.append(Node(
            name=n.name, kind=n.kind, netns=f"{topo.name}-{n.name}", interfaces=tuple(ifs[n.name]),
            asn=numbers["asn"].get(n.name),
            loopback=numbers["loopback"].get(n.name) or info.get("loopback"),
            role=n.role, leaf=ifs[n.name][0].peer if n.kind is Kind.HOST else None,
            gateway=info.get("gateway"), index=_index(n, counters), pod=n.pod, homing=n.homing,
            routes=info.get("routes", ()), static_routes=info.get("static", ()),
            stp_priority=_stp_priority(topo, n), bgp_keepalive=k["keepalive"],
            bgp_hold=k["hold"], maximum_paths=k["maximum_paths"], bfd=k["bfd"],
            bfd_interval_ms=k["interval_ms"], bfd_multiplier=k["multiplier"], plane=n.plane,
            ecmp_hash=k["ecmp_hash"], frr_snippet=k["frr"] if routed and n.kind is not Kind.HOST
            else ""))
    return nodes


def _plan(topo: Topology, source: str, nodes: list[Node], links: list[Link],
          congestion: CongestionPlan | None, aggregates: tuple[tuple[str, str], ...]) -> Plan:
    """The whole: the nodes and links with the lab-wide settings the file gives."""
    l2 = topo.l2
    host_links = [link for link in links if not link.fabric]
    first_host = next((h for h in nodes if h.kind is Kind.HOST), None)
    ls = skeleton.links_spec(topo)
    return Plan(
        lab=topo.name, addressing=topo.addressing,
        speed_bps=host_links[0].speed_bps if host_links else parse_speed(ls.speed),
        mtu=first_host.interfaces[0].mtu if first_host else ls.mtu,
        bfd_enabled=any(n.bfd for n in nodes), bfd_interval_ms=topo.bfd.interval_ms,
        bfd_multiplier=topo.bfd.multiplier, bgp_keepalive=topo.bgp.keepalive,
        bgp_hold=topo.bgp.hold, loopback_pool=topo.pools.loopbacks, host_pool=topo.pools.hosts,
        fabric_pool=topo.pools.fabric if topo.addressing is Addressing.NUMBERED else None,
        nodes=tuple(nodes), links=tuple(links), source=source, congestion=congestion,
        fabric=topo.fabric, pods=topo.pods, planes=topo.planes, frr_configs=_configs_dir(topo, source),
        aggregates=aggregates,
        l2=None if topo.fabric is FabricMode.L3 else L2Plan(
            stp=l2.stp, root=l2.root, forward_delay_s=l2.forward_delay,
            hello_time_s=l2.hello_time, max_age_s=l2.max_age, ageing_time_s=l2.ageing_time,
            mac_table_limit=l2.mac_table_limit, vni=l2.vni),
    )


def _configs_dir(topo: Topology, source: str) -> str | None:
    if topo.frr_configs is None:
        return None
    from pathlib import Path  # the one path the plan resolves: relative to the topology file
    base = Path(source).parent if source and not source.startswith("<") else Path(".")
    return str((base / topo.frr_configs).resolve())


def _index(n: SkNode, counters: dict[Kind, int]) -> int:
    """spine2 -> 2, decode3 -> 3: the number a name ends in, else the position among its kind."""
    m = re.fullmatch(r"[a-z]+?([0-9]+)", n.name)
    return int(m.group(1)) if m else counters[n.kind]


def _stp_priority(topo: Topology, n: SkNode) -> int | None:
    """Root first, then the spines, then the leaves: a spanning tree that is predictable."""
    if topo.fabric is not FabricMode.L2 or n.kind is Kind.HOST:
        return None
    if n.name == topo.l2.root:
        return STP_PRIORITY_ROOT
    return STP_PRIORITY_SPINE if n.kind is Kind.SPINE else STP_PRIORITY_LEAF


def _number_ports(nodes: list[Node]) -> list[Node]:
    """Give every port a lab-wide id in node order (stable: the plan is deterministic)."""
    out, next_id = [], 1
    for node in nodes:
        ports = []
        for port in node.interfaces:
            ports.append(replace(port, port_id=next_id))
            next_id += 1
        out.append(replace(node, interfaces=tuple(ports)))
    return out



def _host_kinds(topo: Topology, source: str, nodes: list[Node]) -> list[Node]:
    """hosts.kind: one kind for all, or per host or leaf (a host's own entry wins)."""
    kind = topo.hosts.kind
    hosts = [n for n in nodes if n.kind is Kind.HOST]
    if isinstance(kind, HostKind):
        chosen = {h.name: kind for h in hosts}
    else:
        leaves = sorted({h.leaf for h in hosts if h.leaf}, key=_natural)
        for key in kind:
            if key not in {h.name for h in hosts} and key not in leaves:
                raise SpecError(source, f"hosts.kind.{key}", "names no host or leaf; hosts: "
                                + ", ".join(h.name for h in hosts)[:100]
                                + "; leaves: " + ", ".join(leaves)[:60])
        chosen = {h.name: kind.get(h.name, kind.get(h.leaf or "", HostKind.ENGINE)) for h in hosts}
    for h in hosts:
        if chosen[h.name] is HostKind.RXE and len(h.interfaces) != 1:
            raise SpecError(source, "hosts.kind", f"{h.name}: an rxe host has one NIC "
                            f"({h.name} has {len(h.interfaces)}: {h.homing.value}-homed)")
    return [replace(n, host_kind=chosen[n.name]) if n.name in chosen else n for n in nodes]


def _natural(name: str) -> tuple[str, int]:
    m = re.fullmatch(r"(.*?)(\d*)", name)
    assert m
    return m.group(1), int(m.group(2) or 0)

