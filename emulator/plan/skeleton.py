"""The skeleton of a fabric: its nodes and links before anything is numbered.

Either generated (a 2- or 3-tier Clos from `spines`, `leaves`, `pods`, `hosts:`)
or explicit (the file's `nodes:` and list of `links:`), checked alike: hosts
attach only to leaves, names are interface names, roles and homing are known.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import SpecError
from ..names import NODE_NAME
from ..spec import Links, LinkSpec, NodeSpec, Role, Topology
from ..units import parse_speed
from .kinds import Homing, Kind


@dataclass
class SkNode:
    name: str
    kind: Kind
    pod: int | None = None
    role: str | None = None
    homing: Homing = Homing.SINGLE
    asn: int | None = None  # explicit (nodes:) ASN
    plane: int | None = None  # planes > 1: the plane of a spine or leaf


@dataclass
class SkLink:
    a: str
    b: str
    speed_bps: int
    mtu: int


@dataclass
class Skeleton:
    nodes: list[SkNode]
    links: list[SkLink]

    def of(self, kind: Kind) -> list[SkNode]:
        return [n for n in self.nodes if n.kind is kind]


def links_spec(topo: Topology) -> Links:
    """The `links:` mapping (defaults when the file gives an explicit list of links)."""
    return topo.links if isinstance(topo.links, Links) else Links()


def build(topo: Topology, source: str) -> Skeleton:
    """The file's own nodes and links, or the Clos its numbers describe."""
    return _explicit(topo, source) if topo.nodes is not None else _generated(topo, source)


def _tier_link(topo: Topology, a: SkNode, b: SkNode) -> SkLink:
    """A generated link at its tier's speed and MTU (links.per_link applied later)."""
    ls = links_spec(topo)
    kinds = {a.kind, b.kind}
    tier = ls.host if Kind.HOST in kinds else (
        ls.spine_super if Kind.SUPERSPINE in kinds else ls.leaf_spine)
    return SkLink(a.name, b.name, parse_speed(tier.speed or ls.speed), tier.mtu or ls.mtu)


def _roles(topo: Topology, leaves: list[str]) -> dict[str, str]:
    first_half = (len(leaves) + 1) // 2
    roles = {leaf: (Role.PREFILL if i < first_half else Role.DECODE).value
             for i, leaf in enumerate(leaves)}
    roles.update(topo.hosts.roles)
    return roles


def _generated(topo: Topology, source: str) -> Skeleton:
    """2-tier (spines x leaves) or 3-tier (pods under superspines) Clos, hosts on leaves."""
    if topo.planes > 1:
        return _planes(topo, source)
    pods = topo.pods or 1
    supers = [SkNode(f"super{i}", Kind.SUPERSPINE) for i in range(1, topo.superspines + 1)]
    spines = [SkNode(f"spine{(p - 1) * topo.spines + i}", Kind.SPINE, pod=topo.pods and p)
              for p in range(1, pods + 1) for i in range(1, topo.spines + 1)]
    leaves = [SkNode(f"leaf{(p - 1) * topo.leaves + i}", Kind.LEAF, pod=topo.pods and p)
              for p in range(1, pods + 1) for i in range(1, topo.leaves + 1)]
    ls = links_spec(topo)
    links = []
    for leaf in leaves:
        for spine in spines:
            if spine.pod == leaf.pod:
                links += [_tier_link(topo, leaf, spine) for _ in range(ls.parallel)]
    links += [_tier_link(topo, spine, sup) for spine in spines for sup in supers]
    _check_host_names(topo, source, [n.name for n in leaves])
    hosts, host_links = _generated_hosts(topo, source, leaves)
    return Skeleton(supers + spines + leaves + hosts, links + host_links)


def plane_node(kind: Kind, plane: int, i: int) -> str:
    """p0spine1, p1leaf2: a spine or leaf of plane `plane` (0-based) on a multi-plane fabric."""
    return f"p{plane}{kind.value}{i}"


def _planes(topo: Topology, source: str) -> Skeleton:
    """planes > 1: per plane its own spines x leaves Clos; host group j hangs off leaf j of
    every plane, NIC k on plane k (the hosts' rail k: hosts.roles/counts name plane 0's leaf)."""
    spines, leaves, links = [], [], []
    for k in range(topo.planes):
        ps = [SkNode(plane_node(Kind.SPINE, k, i), Kind.SPINE, plane=k)
              for i in range(1, topo.spines + 1)]
        pl = [SkNode(plane_node(Kind.LEAF, k, j), Kind.LEAF, plane=k)
              for j in range(1, topo.leaves + 1)]
        links += [_tier_link(topo, leaf, spine) for leaf in pl for spine in ps
                  for _ in range(links_spec(topo).parallel)]
        spines += ps
        leaves += pl
    _check_host_names(topo, source, [n.name for n in leaves[:topo.leaves]])
    columns = [leaves[j::topo.leaves] for j in range(topo.leaves)]  # leaf j of every plane
    hosts, host_links = _grouped_hosts(topo, columns, Homing.RAIL)
    return Skeleton(spines + leaves + hosts, links + host_links)


def _check_host_names(topo: Topology, source: str, leaves: list[str]) -> None:
    h = topo.hosts
    for where, keys in (("hosts.roles", h.roles), ("hosts.counts", h.counts)):
        for leaf in keys:
            if leaf not in leaves:
                raise SpecError(source, f"{where}.{leaf}", f"no such leaf; leaves are "
                                f"{leaves[0]}..{leaves[-1]}" + (
                                    " (plane 0's: its hosts have a NIC in every plane)"
                                    if topo.planes > 1 else ""))
    group = h.rails if h.rails > 1 else (2 if h.dual_homed else 1)
    if group > 1:
        what = f"hosts.rails {h.rails}" if h.rails > 1 else "hosts.dual_homed"
        per_pod = topo.leaves
        if per_pod % group:
            raise SpecError(source, "leaves", f"{what} puts each host on {group} leaves: leaves "
                            f"must be a multiple of {group}{' per pod' if topo.pods else ''} "
                            f"(got {per_pod})")
        if h.counts:
            raise SpecError(source, "hosts.counts", f"not with {what}: every group of "
                            f"{group} leaves carries hosts.per_leaf hosts")


def _generated_hosts(topo: Topology, source: str, leaves: list[SkNode]
                     ) -> tuple[list[SkNode], list[SkLink]]:
    h = topo.hosts
    group = h.rails if h.rails > 1 else (2 if h.dual_homed else 1)
    homing = Homing.RAIL if h.rails > 1 else (Homing.DUAL if h.dual_homed else Homing.SINGLE)
    return _grouped_hosts(topo, [leaves[g:g + group] for g in range(0, len(leaves), group)],
                          homing)


def _grouped_hosts(topo: Topology, groups: list[list[SkNode]], homing: Homing
                   ) -> tuple[list[SkNode], list[SkLink]]:
    """Each group's hosts, one NIC on each leaf of the group (its order: NIC order); the
    group's first leaf names its role and count."""
    h = topo.hosts
    roles = _roles(topo, [g[0].name for g in groups]) if topo.planes > 1 else \
        _roles(topo, [n.name for g in groups for n in g])
    counters: dict[str, int] = {}
    hosts: list[SkNode] = []
    links: list[SkLink] = []
    for members in groups:
        role = roles[members[0].name]
        for _ in range(h.counts.get(members[0].name, h.per_leaf)):
            counters[role] = counters.get(role, 0) + 1
            host = SkNode(f"{role}{counters[role]}", Kind.HOST, role=role, homing=homing)
            hosts.append(host)
            links += [_tier_link(topo, leaf, host) for leaf in members]
    return hosts, links


def _explicit(topo: Topology, source: str) -> Skeleton:
    """The escape hatch: `nodes:` and a list of `links:`, checked like generated ones."""
    assert topo.nodes is not None and isinstance(topo.links, list)
    nodes = _explicit_nodes(topo.nodes, source)
    links = _explicit_links(topo.links, source, {n.name: n for n in nodes})
    for n in nodes:
        mine = [link for link in links if n.name in (link.a, link.b)]
        if not mine:
            raise SpecError(source, f"nodes.{n.name}", "has no links")
        if n.kind is Kind.HOST:
            n.homing = _homing(n.name, topo.nodes[n.name].attach, mine, source)
    return Skeleton(nodes, links)


def _explicit_nodes(specs: dict[str, NodeSpec], source: str) -> list[SkNode]:
    nodes: list[SkNode] = []
    for name, spec in specs.items():
        if not re.fullmatch(NODE_NAME, name):
            raise SpecError(source, f"nodes.{name}", "a node name is 1-12 lowercase letters and "
                            "digits, starting with a letter (it names interfaces too)")
        if spec.kind != "host" and (spec.role or spec.attach):
            raise SpecError(source, f"nodes.{name}.{'role' if spec.role else 'attach'}",
                            "only hosts have a role and an attach mode")
        if spec.kind == "host" and spec.asn is not None:
            raise SpecError(source, f"nodes.{name}.asn", "hosts run no BGP")
        nodes.append(SkNode(name, Kind(spec.kind), role=spec.role or (
            Role.PREFILL.value if spec.kind == "host" else None), asn=spec.asn))
    return nodes


def _explicit_links(specs: list[LinkSpec], source: str, index: dict[str, SkNode]
                    ) -> list[SkLink]:
    links: list[SkLink] = []
    for i, item in enumerate(specs):
        a, b = item.endpoints
        for end in (a, b):
            if end not in index:
                raise SpecError(source, f"links.{i}.endpoints", f"no node {end!r}; nodes: "
                                + ", ".join(index)[:120])
        if a == b:
            raise SpecError(source, f"links.{i}.endpoints", f"links {a} to itself")
        ka, kb = index[a].kind, index[b].kind
        if Kind.HOST in (ka, kb) and {ka, kb} != {Kind.HOST, Kind.LEAF}:
            raise SpecError(source, f"links.{i}.endpoints", f"{a}-{b}: a host links only to leaves")
        links.append(SkLink(a, b, parse_speed(item.speed), item.mtu))
    return links


def _homing(host: str, attach: str | None, mine: list[SkLink], source: str) -> Homing:
    """How an explicit host with links `mine` attaches: one link is single-homed."""
    if len(mine) > 1 and attach is None:
        raise SpecError(source, f"nodes.{host}.attach", f"{len(mine)} links: say rail "
                        "(an address per NIC) or dual (one address over both leaves)")
    if attach == "dual" and len(mine) != 2:
        raise SpecError(source, f"nodes.{host}.attach", f"dual needs exactly 2 links "
                        f"(got {len(mine)})")
    peers = [link.a if link.b == host else link.b for link in mine]
    if len(set(peers)) != len(peers):
        raise SpecError(source, f"nodes.{host}", "has two links to one leaf")
    return Homing(attach) if len(mine) > 1 and attach else Homing.SINGLE

