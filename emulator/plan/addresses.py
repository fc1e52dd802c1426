"""Numbers and wiring: loopbacks, interfaces (named after the peer), veths, fabric /31s,
per-link speed and MTU, and the hosts' addresses and routes (routed: a /31 per NIC in
its leaf's /24; one L2 segment: an address each, no gateway)."""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from typing import Any

from ..errors import SpecError
from ..spec import Addressing, FabricMode, Topology
from ..units import parse_speed
from .kinds import Homing, Kind
from .nodes import Interface, Link, Route
from .skeleton import Skeleton, SkNode, links_spec


def _take(net: ipaddress.IPv4Network, prefix: int, count: int, source: str, field: str
          ) -> list[ipaddress.IPv4Network]:
    if prefix < net.prefixlen or count > 2 ** (prefix - net.prefixlen):
        raise SpecError(source, field, f"{net} is too small: needs {count} /{prefix} blocks")
    it = net.subnets(new_prefix=prefix)
    return [next(it) for _ in range(count)]


def loopbacks(topo: Topology, source: str, routers: list[str]) -> dict[str, str]:
    nets = _take(ipaddress.IPv4Network(topo.pools.loopbacks), 32, len(routers) + 1,
                 source, "pools.loopbacks")[1:]  # skip the network address itself
    return {r: str(n.network_address) for r, n in zip(routers, nets)}


# -- wiring ---------------------------------------------------------------------

def wire(topo: Topology, source: str, sk: Skeleton, knobs: dict[str, dict[str, Any]]
          ) -> tuple[dict[str, list[Interface]], list[Link]]:
    """Interfaces (named after the peer; a parallel link adds _2, _3; hosts eth0..) and
    veths, in link order; numbered fabric links get a /31 each."""
    kind = {n.name: n.kind for n in sk.nodes}
    per_link = _per_link(topo, source, sk)
    fabric_count = sum(1 for link in sk.links if Kind.HOST not in (kind[link.a], kind[link.b]))
    numbered = topo.addressing is Addressing.NUMBERED and topo.fabric is not FabricMode.L2
    subnets = iter(_take(ipaddress.IPv4Network(topo.pools.fabric), 31, fabric_count,
                         source, "pools.fabric") if numbered else [])
    bridged = topo.fabric is FabricMode.L2
    ifs: dict[str, list[Interface]] = {n.name: [] for n in sk.nodes}
    links: list[Link] = []
    for link in sk.links:
        speed, mtu = per_link.get(frozenset((link.a, link.b)), (link.speed_bps, link.mtu))
        fabric = Kind.HOST not in (kind[link.a], kind[link.b])
        net = next(subnets, None) if fabric else None
        names = []
        for me, peer in ((link.a, link.b), (link.b, link.a)):
            if kind[me] is Kind.HOST:
                names.append(f"eth{len(ifs[me])}")
            else:
                n = sum(1 for p in ifs[me] if p.peer == peer)
                names.append(peer if n == 0 else f"{peer}_{n + 1}")
        for i, (me, peer) in enumerate(((link.a, link.b), (link.b, link.a))):
            ifs[me].append(Interface(
                names[i], peer, names[1 - i], f"{net[1 - i]}/31" if net else None, fabric=fabric,
                bridged=bridged and fabric, speed_bps=speed, mtu=knobs[me]["mtu"] or mtu,
                rail=len(ifs[me]) if kind[me] is Kind.HOST else None))
        links.append(Link(link.a, names[0], link.b, names[1], fabric, speed, mtu))
    return ifs, links


def _per_link(topo: Topology, source: str, sk: Skeleton) -> dict[frozenset[str], tuple[int, int]]:
    ls = links_spec(topo)
    linked = {frozenset((link.a, link.b)): link for link in sk.links}
    out = {}
    for key, tier in ls.per_link.items():
        ends = key.split("-")
        pair = frozenset(ends)
        if len(ends) != 2 or pair not in linked:
            raise SpecError(source, f"links.per_link.{key}", "names no link; write a-b with "
                            "two linked nodes, e.g. leaf1-spine1")
        link = linked[pair]
        out[pair] = (parse_speed(tier.speed) if tier.speed else link.speed_bps,
                     tier.mtu or link.mtu)
    return out



def host_addresses(topo: Topology, source: str, sk: Skeleton,
                   ifs: dict[str, list[Interface]]) -> dict[str, dict[str, Any]]:
    """Routed hosts: a /24 of pools.hosts per leaf, a /31 per host NIC in its leaf's /24
    (leaf end .0, host end .1); a dual-homed host's own /32 from the /24 after the leaves'.
    With bgp.aggregate_hosts each leaf with hosts gets its /24 as the one prefix it announces
    for them (info[leaf]["aggregate"]).
    Hosts route by rail (a rail's /24s over that rail's NIC) and by default over NIC 0,
    or over both NICs (dual-homed)."""
    leaves = [n.name for n in sk.of(Kind.LEAF)]
    hosts = sk.of(Kind.HOST)
    dual = [h for h in hosts if h.homing is Homing.DUAL]
    blocks = _take(ipaddress.IPv4Network(topo.pools.hosts), 24, len(leaves) + bool(dual),
                   source, "pools.hosts")
    block_of = dict(zip(leaves, blocks))
    free = {leaf: iter(block.subnets(new_prefix=31)) for leaf, block in block_of.items()}
    own = iter(list(blocks[-1].hosts())[: len(dual)] if dual else [])
    rail_of = _rails(source, hosts, ifs)
    info: dict[str, dict[str, Any]] = {}
    static: dict[str, list[tuple[str, str]]] = {}
    for h in hosts:
        gws = _address_nics(source, h, ifs, free)
        entry: dict[str, Any] = {"gateway": gws[0][0]}
        if h.homing is Homing.DUAL:
            entry["loopback"] = str(next(own))
            entry["routes"] = (Route("0.0.0.0/0", tuple(gws)),)
            for p in ifs[h.name]:  # each leaf routes the /32 to the host's end of its link
                static.setdefault(p.peer, []).append(
                    (f"{entry['loopback']}/32", (p.address or "").split("/")[0]))
        elif h.homing is Homing.RAIL:
            routes = [Route("0.0.0.0/0", (gws[0],))]
            for k, (gw, dev) in enumerate(gws):
                routes += [Route(str(block_of[leaf]), ((gw, dev),)) for leaf in leaves
                           if rail_of.get(leaf) == k and k > 0]
            entry["routes"] = tuple(routes)
        else:
            entry["routes"] = (Route("0.0.0.0/0", (gws[0],)),)
        info[h.name] = entry
    for leaf, statics in static.items():
        info.setdefault(leaf, {})["static"] = tuple(statics)
    if topo.bgp.aggregate_hosts:  # a leaf's /24 for all its host links, where it has any
        used = {p.peer for h in hosts for p in ifs[h.name]}
        for leaf in leaves:
            if leaf in used:
                info.setdefault(leaf, {})["aggregate"] = str(block_of[leaf])
    return info


def _rails(source: str, hosts: list[SkNode], ifs: dict[str, list[Interface]]) -> dict[str, int]:
    """leaf -> the rail (NIC index) every rail-homed host on it uses it as."""
    rail_of: dict[str, int] = {}
    for h in hosts:
        if h.homing is Homing.RAIL:
            for k, p in enumerate(ifs[h.name]):
                if rail_of.setdefault(p.peer, k) != k:
                    raise SpecError(source, f"nodes.{h.name}", f"its NIC {k} is on {p.peer}, "
                                    f"which other hosts use as rail {rail_of[p.peer]}")
    return rail_of


def _address_nics(source: str, h: SkNode, ifs: dict[str, list[Interface]],
                  free: dict[str, Any]) -> list[tuple[str, str]]:
    """A /31 of its leaf's /24 on each NIC of `h` and its leaf's end: (gateway, NIC) each."""
    gws = []
    for i, p in enumerate(ifs[h.name]):
        net = next(free[p.peer], None)
        if net is None:
            raise SpecError(source, "hosts", f"{p.peer} has more than 128 host links")
        gw = str(net[0])
        ifs[h.name][i] = replace(p, address=f"{net[1]}/31")
        _leaf_end(ifs, p.peer, h.name, address=f"{gw}/31")
        gws.append((gw, p.name))
    return gws


def _leaf_end(ifs: dict[str, list[Interface]], leaf: str, host: str, **changes: Any) -> None:
    """Change the port of `leaf` that faces `host`."""
    ports = ifs[leaf]
    j = next(j for j, q in enumerate(ports) if q.peer == host)
    ports[j] = replace(ports[j], **changes)


def segment_addresses(topo: Topology, source: str, sk: Skeleton,
                      ifs: dict[str, list[Interface]]) -> dict[str, dict[str, Any]]:
    """Hosts of one stretched L2 segment (fabric l2, evpn): every host an address of
    pools.hosts, no gateway; each leaf's host-facing ports are bridge ports."""
    pool = ipaddress.IPv4Network(topo.pools.hosts)
    hosts = sk.of(Kind.HOST)
    if pool.num_addresses - 2 < len(hosts):
        raise SpecError(source, "pools.hosts", f"{pool} is too small: one segment of "
                        f"{len(hosts)} hosts needs at least a /{32 - (len(hosts) + 1).bit_length()}")
    addresses = iter(pool.hosts())
    for h in hosts:
        p = ifs[h.name][0]
        ifs[h.name][0] = replace(p, address=f"{next(addresses)}/{pool.prefixlen}")
        _leaf_end(ifs, p.peer, h.name, bridged=True)
    return {}
