"""The routing model, purely from a Plan: what each router's FIB must hold
(`fib_targets`), how wide (`expected_widths`: an eBGP path-vector over the graph)
and the tree 802.1D settles on (`stp_tree`), also around cut links and dead nodes.

converge, faults, status, render and forwarding read it through the Plan's methods
of the same names (which keep the healthy fabric's answers).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Protocol

from ..spec import FabricMode
from .kinds import Homing
from .nodes import Interface, L2Plan, Node

Origins = tuple[tuple[str, str | None], ...]  # (leaf, host): alive while that link is
Target = tuple[str, Origins]  # (prefix, origins)
Cut = frozenset[frozenset[str]]  # links, each as the pair of its ends


class Plan(Protocol):
    """What the routing model reads of a plan (records.Plan, which calls into this module
    for its fib_targets, expected_widths and stp_tree: so this module cannot import it)."""

    @property
    def fabric(self) -> FabricMode: ...
    @property
    def l2(self) -> L2Plan | None: ...
    @property
    def routers(self) -> list[Node]: ...
    @property
    def hosts(self) -> list[Node]: ...
    @property
    def leaf_nodes(self) -> list[Node]: ...
    @property
    def frr_nodes(self) -> list[Node]: ...
    @property
    def aggregates(self) -> tuple[tuple[str, str], ...]: ...
    def node(self, name: str) -> Node: ...
    def fib_targets(self) -> list[Target]: ...


def network(cidr: str) -> str:
    return str(ipaddress.IPv4Interface(cidr).network)


def fib_targets(plan: Plan) -> list[Target]:
    """(prefix, origins) each router's FIB must hold: every host NIC's /31 (or, with
    bgp.aggregate_hosts, each leaf's /24 in their place) and each dual-homed host's /32 on
    l3, a leaf's VTEP loopback on evpn, nothing on l2. An origin is (leaf, host): the
    prefix lives while that leaf-host link does (a leaf's /24: while any of its host
    links does; host None: a loopback, alive with its leaf)."""
    if plan.fabric is FabricMode.L3:
        aggregate = dict(plan.aggregates)
        out: list[Target] = [(block, tuple((leaf, h.name) for h in plan.hosts
                                           for p in h.interfaces if p.peer == leaf))
                             for leaf, block in plan.aggregates]
        for h in plan.hosts:
            out += [(network(p.address or ""), ((p.peer, h.name),)) for p in h.interfaces
                    if p.peer not in aggregate]
            if h.homing is Homing.DUAL:
                out.append((f"{h.loopback}/32", tuple((leaf, h.name) for leaf in h.leaves)))
        return out
    if plan.fabric is FabricMode.EVPN:
        return [(f"{leaf.loopback}/32", ((leaf.name, None),)) for leaf in plan.leaf_nodes]
    return []


def expected_widths(plan: Plan, cut: Cut = frozenset(), dead: frozenset[str] = frozenset()
                    ) -> dict[str, dict[str, int]]:
    """router -> prefix -> the next hops BGP installs (0: no route), around `cut` links
    and `dead` nodes: an eBGP path-vector run over the plan's graph. Each router takes
    the shortest AS paths its live links offer, refusing any holding its own ASN (so a
    spine never reaches a leaf through another spine of its ASN); each parallel link is
    a session of its own, and maximum-paths caps the width."""
    routers = [r for r in plan.frr_nodes if r.name not in dead]
    alive = {r.name for r in routers}
    sessions = {r.name: [p.peer for p in r.interfaces if p.fabric and p.peer in alive
                         and frozenset((r.name, p.peer)) not in cut] for r in routers}
    out: dict[str, dict[str, int]] = {r.name: {} for r in routers}
    for prefix, origins in plan.fib_targets():
        live = {leaf for leaf, host in origins if leaf in alive
                and (host is None or frozenset((leaf, host)) not in cut)}
        paths = path_vector(plan, sessions, live)
        planes = {plan.node(leaf).plane for leaf, _ in origins}
        for r in routers:
            if r.name in {leaf for leaf, _ in origins} or r.plane not in planes:
                continue  # its own, or another plane's (planes > 1: no path between planes)
            width, _ = paths.get(r.name, (0, ()))
            out[r.name][prefix] = min(width, r.maximum_paths)
    return out


def path_vector(plan: Plan, sessions: dict[str, list[str]], origins: set[str]
                ) -> dict[str, tuple[int, tuple[int, ...]]]:
    """router -> (width, AS path of its best route) toward a prefix `origins` announce."""
    asn = {name: plan.node(name).asn or 0 for name in sessions}
    best: dict[str, tuple[int, tuple[int, ...]]] = {o: (1, ()) for o in origins}
    for _ in range(len(sessions) + 1):  # a path is at most one hop per router long
        changed = False
        for r in sorted(sessions):
            if r in origins:
                continue
            offers = [(asn[n],) + best[n][1] for n in sessions[r] if n in best]
            offers = [o for o in offers if asn[r] not in o]
            if not offers:
                changed |= best.pop(r, None) is not None
                continue
            shortest = min(len(o) for o in offers)
            now = (sum(1 for o in offers if len(o) == shortest),
                   min(o for o in offers if len(o) == shortest))
            if best.get(r) != now:
                best[r], changed = now, True
        if not changed:
            break
    return best


def stp_tree(plan: Plan, cut: Cut = frozenset(), dead: frozenset[str] = frozenset()
             ) -> dict[str, dict[str, str]]:
    """The port states 802.1D settles on (fabric l2): switch -> port -> forwarding,
    blocking or disabled (a cut link), for the switches not in `dead`.

    Every path cost is equal (veths of one speed), so each switch's root path cost
    is its hop count to the root of its part of the fabric (the lowest bridge id:
    priority, then the fixed bridge MAC). A switch's root port leads to its
    best neighbour (lowest cost, then bridge id); on every other link the end
    offering the better path is designated; what is neither blocks. Host ports
    are designated. Empty when STP is off or the fabric is routed.
    """
    if plan.fabric is not FabricMode.L2 or not plan.l2 or not plan.l2.stp:
        return {}
    switches = [n for n in plan.routers if n.name not in dead]
    alive = {n.name for n in switches}

    def bid(name: str) -> tuple[int, str]:
        node = plan.node(name)
        return (node.stp_priority or 0, node.bridge_mac)

    def up(a: str, b: str) -> bool:
        return frozenset((a, b)) not in cut and a in alive and b in alive

    neighbours = {n.name: [p.peer for p in n.interfaces if p.fabric and up(n.name, p.peer)]
                  for n in switches}
    cost = _root_costs(neighbours, bid)
    rank = {a: (cost[a], bid(a)) for a in alive}
    root_port = {a: min(neighbours[a], key=rank.__getitem__) for a in alive if cost[a] > 0}
    return {node.name: {p.name: _port_state(node.name, p, up, root_port, rank)
                        for p in node.interfaces} for node in switches}


def _root_costs(neighbours: dict[str, list[str]], bid: Callable[[str], tuple[int, str]]
                ) -> dict[str, int]:
    """Each switch's hop count to the root of its connected part (its lowest bridge id)."""
    cost: dict[str, int] = {}
    for start in sorted(neighbours, key=bid):  # each connected part from its own root
        if start in cost:
            continue
        cost[start], frontier = 0, [start]
        while frontier:
            nxt = []
            for a in frontier:
                for b in neighbours[a]:
                    if b not in cost:
                        cost[b] = cost[a] + 1
                        nxt.append(b)
            frontier = nxt
    return cost


def _port_state(me: str, port: Interface, up: Callable[[str, str], bool],
                root_port: dict[str, str], rank: dict[str, tuple[int, tuple[int, str]]]) -> str:
    if not port.fabric:
        return "forwarding"
    if not up(me, port.peer):
        return "disabled"
    if root_port.get(me) == port.peer or rank[me] < rank[port.peer]:
        return "forwarding"  # root port, or designated
    return "blocking"
