"""Plan compiler: a validated Topology -> a frozen, fully resolved Plan.

Pure and deterministic (no root, no I/O): every name, address, ASN and
interface of the lab is decided here, so render, realize, status and tests
all read the same facts. Semantic problems the schema cannot express (a
role for a leaf that does not exist, a pool too small) are SpecErrors that
name the field.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Any

from .congestion.model import CongestionPlan
from .congestion.model import resolve as resolve_congestion
from .errors import SpecError
from .spec import (
    DEFAULT_LEAF_BASE,
    Addressing,
    EcmpHash,
    FabricMode,
    HostKind,
    Links,
    Role,
    Topology,
    asn_problem,
)
from .units import Dilation, parse_speed

HOST_IFNAME = "eth0"
MAX_ASN = 4294967294  # 4-byte ASNs; 4294967295 is reserved
LAST_PRIVATE_16, FIRST_PRIVATE_32 = 65534, 4200000000  # RFC 6996 private-use ASNs
BRIDGE = "br0"  # the one bridge of a bridging switch (fabric l2; leaves of fabric evpn)
VXLAN_OVERHEAD = 50  # outer Ethernet + IPv4 + UDP + VXLAN: the underlay's MTU is this much larger
STP_PRIORITY_ROOT, STP_PRIORITY_SPINE, STP_PRIORITY_LEAF = 4096, 8192, 32768


class Kind(str, Enum):
    SUPERSPINE = "superspine"
    SPINE = "spine"
    LEAF = "leaf"
    HOST = "host"


class Homing(str, Enum):
    SINGLE = "single"  # one NIC on one leaf
    RAIL = "rail"  # NIC k on the k-th leaf of the host's rail group, an address per NIC
    DUAL = "dual"  # two NICs on a leaf pair, one address (a /32 on lo), ECMP default route


@dataclass(frozen=True)
class Interface:
    name: str  # on routers: the peer node's name; on hosts: eth0
    peer: str  # peer node
    peer_ifname: str
    address: str | None  # "10.1.0.0/31", or None for an unnumbered fabric port
    fabric: bool  # leaf-spine link (BGP runs over it on a routed fabric)
    port_id: int = 0  # lab-wide port number, 1.. (the BPF dataplane's key)
    bridged: bool = False  # a port of the switch's bridge (fabric l2; evpn leaves' host ports)
    speed_bps: int = 0  # declared line rate of the link
    mtu: int = 0  # this end's MTU (the link's, unless an override changes the node's ends)
    rail: int | None = None  # hosts: the NIC's index (rail k on rail-optimized fabrics)

    @property
    def mac(self) -> str:
        """02:52:4c:00:HI:LO -- locally administered, port id in the low 16 bits."""
        return f"02:52:4c:00:{self.port_id >> 8:02x}:{self.port_id & 0xFF:02x}"


@dataclass(frozen=True)
class Node:
    name: str
    kind: Kind
    netns: str
    interfaces: tuple[Interface, ...]
    asn: int | None = None
    loopback: str | None = None  # router-id, /32 on lo
    role: str | None = None  # hosts only: prefill, decode or a user's role name
    leaf: str | None = None  # hosts only: the leaf it hangs off
    gateway: str | None = None  # hosts only: default route next hop (none on one L2 segment)
    stp_priority: int | None = None  # switches holding a bridge: its STP bridge priority
    index: int = 0  # 1-based position among nodes of its kind (spine2 -> 2)
    pod: int | None = None  # 3-tier: the pod of a spine or leaf
    homing: Homing = Homing.SINGLE  # hosts
    routes: tuple[Route, ...] = ()  # hosts: kernel routes (the default route included)
    static_routes: tuple[tuple[str, str], ...] = ()  # leaves: (prefix, next hop) to dual-homed hosts
    bgp_keepalive: int = 3
    bgp_hold: int = 9
    maximum_paths: int = 64
    bfd: bool = False
    bfd_interval_ms: int = 100
    bfd_multiplier: int = 3
    ecmp_hash: EcmpHash = EcmpHash.L4
    frr_snippet: str = ""  # user FRR configuration applied after the rendered one
    host_kind: HostKind = HostKind.ENGINE  # hosts: rocelab's engine, or Soft-RoCE in a guest

    @property
    def is_router(self) -> bool:
        return self.kind is not Kind.HOST

    @property
    def address(self) -> str | None:
        """A host's own IPv4 address (no prefix length): a dual-homed host's /32 on lo, else
        its first NIC's."""
        if self.kind is not Kind.HOST:
            return None
        if self.homing is Homing.DUAL:
            return self.loopback
        return self.interfaces[0].address.split("/")[0] if self.interfaces[0].address else None

    @property
    def addresses(self) -> list[str]:
        """Every address a host's engine sends from: one per rail (NIC) on a rail fabric."""
        if self.homing is Homing.RAIL:
            return [p.address.split("/")[0] for p in self.interfaces if p.address]
        return [self.address] if self.address else []

    @property
    def leaves(self) -> list[str]:
        """A host's leaves, NIC order."""
        return [p.peer for p in self.interfaces] if self.kind is Kind.HOST else []

    @property
    def bridge(self) -> str | None:
        """The bridge device of a bridging switch, or None."""
        return BRIDGE if any(p.bridged for p in self.interfaces) else None

    def ports_to(self, peer: str) -> list[Interface]:
        """Every port toward `peer` (parallel links: more than one)."""
        return [p for p in self.interfaces if p.peer == peer]

    @property
    def bridge_mac(self) -> str:
        """Fixed bridge MAC (02:52:4c:01:KK:II): with the priority, a deterministic STP bridge id."""
        return f"02:52:4c:01:{0 if self.kind is Kind.SPINE else 1:02x}:{self.index:02x}"

    def interface(self, name: str) -> Interface:
        for i in self.interfaces:
            if i.name == name:
                return i
        raise KeyError(name)


@dataclass(frozen=True)
class Route:
    """A host's kernel route: to `dst` over one or more (gateway, device) next hops."""

    dst: str
    via: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Link:
    a: str
    a_ifname: str
    b: str
    b_ifname: str
    fabric: bool
    speed_bps: int = 0
    mtu: int = 0


@dataclass(frozen=True)
class L2Plan:
    """Bridges, STP and MAC tables (fabric l2; evpn leaves use vni and the MAC limit)."""

    stp: bool
    root: str
    forward_delay_s: int
    hello_time_s: int
    max_age_s: int
    ageing_time_s: int
    mac_table_limit: int  # 0: unlimited
    vni: int

    @property
    def vxlan(self) -> str:
        return f"vni{self.vni}"


@dataclass(frozen=True)
class Plan:
    lab: str
    addressing: Addressing
    speed_bps: int
    mtu: int
    bfd_enabled: bool
    bfd_interval_ms: int
    bfd_multiplier: int
    bgp_keepalive: int
    bgp_hold: int
    loopback_pool: str
    host_pool: str
    fabric_pool: str | None
    nodes: tuple[Node, ...]
    links: tuple[Link, ...]
    source: str = ""
    congestion: CongestionPlan | None = None  # None: unshaped links, no ECN/PFC/DCQCN
    fabric: FabricMode = FabricMode.L3
    l2: L2Plan | None = None  # fabric l2 and evpn
    pods: int | None = None  # 3-tier
    frr_configs: str | None = None  # a directory of <router>/frr.conf replacing the rendered ones
    _index: dict[str, Node] = field(default_factory=dict, compare=False, repr=False)
    _healthy: dict[str, dict[str, int]] = field(default_factory=dict, compare=False, repr=False)
    _targets: list[tuple[str, tuple[tuple[str, str | None], ...]]] = field(
        default_factory=list, compare=False, repr=False)  # fib_targets, once (polled per round)

    def __post_init__(self) -> None:
        self._index.update({n.name: n for n in self.nodes})

    def node(self, name: str) -> Node:
        try:
            return self._index[name]
        except KeyError:
            raise KeyError(f"no node {name!r}; nodes: {', '.join(self._index)}") from None

    def of_kind(self, kind: Kind) -> list[Node]:
        return [n for n in self.nodes if n.kind is kind]

    @property
    def dilation(self) -> Dilation:
        """Time dilation D of the congestion plane (with its arithmetic); 1 on an unshaped lab."""
        return Dilation(self.congestion.dilation if self.congestion else 1.0)

    @property
    def routers(self) -> list[Node]:
        return [n for n in self.nodes if n.is_router]

    @property
    def hosts(self) -> list[Node]:
        return self.of_kind(Kind.HOST)

    @property
    def spines(self) -> list[Node]:
        return self.of_kind(Kind.SPINE)

    @property
    def leaf_nodes(self) -> list[Node]:
        return self.of_kind(Kind.LEAF)

    def shape(self) -> str:
        """'2 spines x 4 leaves', '2 superspines over 2 pods of 2 spines x 2 leaves'."""
        supers = self.of_kind(Kind.SUPERSPINE)
        if supers and self.pods:
            return (f"{len(supers)} superspines over {self.pods} pods of "
                    f"{len(self.spines) // self.pods} spines x {len(self.leaf_nodes) // self.pods} leaves")
        return (f"{len(supers)} superspines, " if supers else "") + \
            f"{len(self.spines)} spines x {len(self.leaf_nodes)} leaves"

    def hosts_of(self, leaf: str) -> list[Node]:
        """Hosts with a NIC on `leaf`."""
        return [h for h in self.hosts if leaf in h.leaves]

    def oversubscription(self) -> dict[str, float]:
        """Down/up capacity of every leaf with hosts (and every spine below superspines):
        1.0 is non-blocking, 2.0 means the downlinks can offer twice what the uplinks carry."""
        out = {}
        tiers = {Kind.LEAF: (Kind.HOST, Kind.SPINE), Kind.SPINE: (Kind.LEAF, Kind.SUPERSPINE)}
        for node in self.routers:
            if node.kind not in tiers:
                continue
            down_kind, up_kind = tiers[node.kind]
            up = sum(p.speed_bps for p in node.interfaces if self.node(p.peer).kind is up_kind)
            down = sum(p.speed_bps for p in node.interfaces if self.node(p.peer).kind is down_kind)
            if up and down:
                out[node.name] = round(down / up, 3)
        return out

    @property
    def frr_nodes(self) -> list[Node]:
        """Switches that run FRR: every router, except on a bridged (l2) fabric."""
        return [] if self.fabric is FabricMode.L2 else self.routers

    @property
    def routed(self) -> bool:
        """Does BGP route between leaves (l3, and evpn's underlay)?"""
        return self.fabric is not FabricMode.L2

    def port_mtu(self, port: Interface) -> int:
        """A port's MTU: its own (the plan's where a hand-built port has none), plus the VXLAN
        header on an EVPN underlay link."""
        vxlan = VXLAN_OVERHEAD if self.fabric is FabricMode.EVPN and port.fabric else 0
        return (port.mtu or self.mtu) + vxlan

    def fib_targets(self) -> list[tuple[str, tuple[tuple[str, str | None], ...]]]:
        """(prefix, origins) each router's FIB must hold: every host NIC's /31 and each
        dual-homed host's /32 on l3, a leaf's VTEP loopback on evpn, nothing on l2.
        An origin is (leaf, host): the prefix lives while that leaf-host link does
        (host None: a loopback, alive with its leaf)."""
        if not self._targets:
            self._targets.extend(self._fib_targets())
        return list(self._targets)

    def _fib_targets(self) -> list[tuple[str, tuple[tuple[str, str | None], ...]]]:
        if self.fabric is FabricMode.L3:
            out: list[tuple[str, tuple[tuple[str, str | None], ...]]] = []
            for h in self.hosts:
                out += [(_network(p.address or ""), ((p.peer, h.name),)) for p in h.interfaces]
                if h.homing is Homing.DUAL:
                    out.append((f"{h.loopback}/32", tuple((leaf, h.name) for leaf in h.leaves)))
            return out
        if self.fabric is FabricMode.EVPN:
            return [(f"{leaf.loopback}/32", ((leaf.name, None),)) for leaf in self.leaf_nodes]
        return []

    def fib_prefixes(self, router: Node) -> list[str]:
        """Prefixes `router` must learn through BGP (not those it originates itself)."""
        return [p for p, origins in self.fib_targets()
                if router.name not in {leaf for leaf, _ in origins}]

    def expected_widths(self, cut: frozenset[frozenset[str]] = frozenset(),
                        dead: frozenset[str] = frozenset()) -> dict[str, dict[str, int]]:
        """router -> prefix -> the next hops BGP installs (0: no route), around `cut` links
        and `dead` nodes: an eBGP path-vector run over the plan's graph. Each router takes
        the shortest AS paths its live links offer, refusing any holding its own ASN (so a
        spine never reaches a leaf through another spine of its ASN); each parallel link is
        a session of its own, and maximum-paths caps the width."""
        if not cut and not dead and self._healthy:
            return {r: dict(w) for r, w in self._healthy.items()}
        routers = [r for r in self.frr_nodes if r.name not in dead]
        alive = {r.name for r in routers}
        sessions = {r.name: [p.peer for p in r.interfaces if p.fabric and p.peer in alive
                             and frozenset((r.name, p.peer)) not in cut] for r in routers}
        out: dict[str, dict[str, int]] = {r.name: {} for r in routers}
        for prefix, origins in self.fib_targets():
            live = {leaf for leaf, host in origins if leaf in alive
                    and (host is None or frozenset((leaf, host)) not in cut)}
            paths = _path_vector(self, sessions, live)
            for r in routers:
                if r.name in {leaf for leaf, _ in origins}:
                    continue
                width, _ = paths.get(r.name, (0, ()))
                out[r.name][prefix] = min(width, r.maximum_paths)
        if not cut and not dead:
            self._healthy.update({r: dict(w) for r, w in out.items()})
        return out

    def stp_tree(self, cut: frozenset[frozenset[str]] = frozenset(),
                 dead: frozenset[str] = frozenset()) -> dict[str, dict[str, str]]:
        """The port states 802.1D settles on (fabric l2): switch -> port -> forwarding,
        blocking or disabled (a cut link), for the switches not in `dead`.

        Every path cost is equal (veths of one speed), so each switch's root path cost
        is its hop count to the root of its part of the fabric (the lowest bridge id:
        priority, then the fixed bridge MAC). A switch's root port leads to its
        best neighbour (lowest cost, then bridge id); on every other link the end
        offering the better path is designated; what is neither blocks. Host ports
        are designated. Empty when STP is off or the fabric is routed.
        """
        if self.fabric is not FabricMode.L2 or not self.l2 or not self.l2.stp:
            return {}
        switches = [n for n in self.routers if n.name not in dead]
        alive = {n.name for n in switches}

        def bid(name: str) -> tuple[int, str]:
            node = self.node(name)
            return (node.stp_priority or 0, node.bridge_mac)

        def up(a: str, b: str) -> bool:
            return frozenset((a, b)) not in cut and a in alive and b in alive

        neighbours = {n.name: [p.peer for p in n.interfaces if p.fabric and up(n.name, p.peer)]
                      for n in switches}
        cost: dict[str, int] = {}
        for start in sorted(alive, key=bid):  # each connected part from its own root
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
        root_port = {a: min(neighbours[a], key=lambda b: (cost[b], bid(b)))
                     for a in alive if cost[a] > 0}
        tree: dict[str, dict[str, str]] = {}
        for node in switches:
            ports = tree[node.name] = {}
            for p in node.interfaces:
                if not p.fabric:
                    ports[p.name] = "forwarding"
                elif not up(node.name, p.peer):
                    ports[p.name] = "disabled"
                elif root_port.get(node.name) == p.peer or \
                        (cost[node.name], bid(node.name)) < (cost[p.peer], bid(p.peer)):
                    ports[p.name] = "forwarding"  # root port, or designated
                else:
                    ports[p.name] = "blocking"
        return tree

    def stp_blocked(self) -> list[tuple[str, str]]:
        """(switch, port) pairs the spanning tree blocks on a healthy l2 fabric: with a spine
        root, (spines-1) x (leaves-1) links -- every other spine keeps only leaf1."""
        return [(sw, port) for sw, ports in self.stp_tree().items()
                for port, st in ports.items() if st == "blocking"]

    def peer_address(self, port: Interface) -> str | None:
        """The address on the far end of a port, without prefix length."""
        addr = self.node(port.peer).interface(port.peer_ifname).address
        return addr.split("/")[0] if addr else None

    def host_prefix(self, host: Node) -> str:
        """The prefix that reaches a host: a dual-homed host's /32, else its first NIC's /31."""
        if host.homing is Homing.DUAL:
            return f"{host.loopback}/32"
        return _network(host.interfaces[0].address or "")

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("_index")
        d.pop("_healthy")
        d.pop("_targets")
        return _jsonable(d)


def _names(names: list[str]) -> str:
    """spine1..spine2, leaf1..leaf4: a list of generated names, short."""
    runs: list[list[str]] = []
    for name in names:
        stem = name.rstrip("0123456789")
        if runs and runs[-1][0].rstrip("0123456789") == stem:
            runs[-1].append(name)
        else:
            runs.append([name])
    text = ", ".join(r[0] if len(r) == 1 else f"{r[0]}..{r[-1]}" for r in runs)
    return text if len(text) <= 120 else text[:117] + "..."


def _network(cidr: str) -> str:
    return str(ipaddress.IPv4Interface(cidr).network)


def _path_vector(plan: Plan, sessions: dict[str, list[str]], origins: set[str]
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


def _jsonable(v: Any) -> Any:
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


# -- compiling: a skeleton (nodes and links, generated or explicit), then numbers --------

@dataclass
class _Node:
    name: str
    kind: Kind
    pod: int | None = None
    role: str | None = None
    homing: Homing = Homing.SINGLE
    asn: int | None = None  # explicit (nodes:) ASN


@dataclass
class _Link:
    a: str
    b: str
    speed_bps: int
    mtu: int


@dataclass
class _Skeleton:
    nodes: list[_Node]
    links: list[_Link]

    def of(self, kind: Kind) -> list[_Node]:
        return [n for n in self.nodes if n.kind is kind]


def _links_spec(topo: Topology) -> Links:
    """The `links:` mapping (defaults when the file gives an explicit list of links)."""
    return topo.links if isinstance(topo.links, Links) else Links()


def compile_plan(topo: Topology, source: str = "<topology>") -> Plan:
    """The table of contents of planning: a skeleton, then numbers, then wiring."""
    _check_semantics(topo, source)
    sk = _explicit(topo, source) if topo.nodes is not None else _generated(topo, source)
    names = {n.name for n in sk.nodes}
    knobs = _resolve_overrides(topo, source, sk)
    routed = topo.fabric is not FabricMode.L2
    routers = [n.name for n in sk.nodes if n.kind is not Kind.HOST]
    asns = _asns(topo, source, sk, knobs) if routed else {}
    loopbacks = _loopbacks(topo, source, routers) if routed else {}
    ifs, links = _wire(topo, source, sk, knobs)
    hosts = [n for n in sk.nodes if n.kind is Kind.HOST]
    segment = topo.fabric is not FabricMode.L3
    host_info = (_segment_addresses(topo, source, sk, ifs) if segment
                 else _host_addresses(topo, source, sk, ifs))
    counters: dict[Kind, int] = {}
    nodes = []
    for n in sk.nodes:
        counters[n.kind] = counters.get(n.kind, 0) + 1
        k = knobs[n.name]
        info = host_info.get(n.name, {})
        nodes.append(Node(
            name=n.name, kind=n.kind, netns=f"{topo.name}-{n.name}", interfaces=tuple(ifs[n.name]),
            asn=asns.get(n.name), loopback=loopbacks.get(n.name) or info.get("loopback"),
            role=n.role, leaf=ifs[n.name][0].peer if n.kind is Kind.HOST else None,
            gateway=info.get("gateway"), index=_index(n, counters), pod=n.pod, homing=n.homing,
            routes=info.get("routes", ()), static_routes=info.get("static", ()),
            stp_priority=_stp_priority(topo, n), bgp_keepalive=k["keepalive"],
            bgp_hold=k["hold"], maximum_paths=k["maximum_paths"], bfd=k["bfd"],
            bfd_interval_ms=k["interval_ms"], bfd_multiplier=k["multiplier"],
            ecmp_hash=k["ecmp_hash"], frr_snippet=k["frr"] if routed and n.kind is not Kind.HOST
            else ""))
    nodes = _number_ports(nodes)
    nodes = _host_kinds(topo, source, nodes)
    congestion = resolve_congestion(topo, source, set(routers), {h.name for h in hosts},
                                    max(link.speed_bps for link in links))
    l2 = topo.l2
    host_links = [link for link in links if not link.fabric]
    first_host = next((h for h in nodes if h.kind is Kind.HOST), None)
    ls = _links_spec(topo)
    return Plan(
        lab=topo.name, addressing=topo.addressing,
        speed_bps=host_links[0].speed_bps if host_links else parse_speed(ls.speed),
        mtu=first_host.interfaces[0].mtu if first_host else ls.mtu,
        bfd_enabled=any(n.bfd for n in nodes), bfd_interval_ms=topo.bfd.interval_ms,
        bfd_multiplier=topo.bfd.multiplier, bgp_keepalive=topo.bgp.keepalive,
        bgp_hold=topo.bgp.hold, loopback_pool=topo.pools.loopbacks, host_pool=topo.pools.hosts,
        fabric_pool=topo.pools.fabric if topo.addressing is Addressing.NUMBERED else None,
        nodes=tuple(nodes), links=tuple(links), source=source, congestion=congestion,
        fabric=topo.fabric, pods=topo.pods, frr_configs=_configs_dir(topo, source),
        l2=None if topo.fabric is FabricMode.L3 else L2Plan(
            stp=l2.stp, root=l2.root, forward_delay_s=l2.forward_delay,
            hello_time_s=l2.hello_time, max_age_s=l2.max_age, ageing_time_s=l2.ageing_time,
            mac_table_limit=l2.mac_table_limit, vni=l2.vni),
    ) if names else _no_nodes(source)


def _no_nodes(source: str) -> Plan:
    raise SpecError(source, "nodes", "must name at least one node")


def _configs_dir(topo: Topology, source: str) -> str | None:
    if topo.frr_configs is None:
        return None
    from pathlib import Path  # the one path the plan resolves: relative to the topology file
    base = Path(source).parent if source and not source.startswith("<") else Path(".")
    return str((base / topo.frr_configs).resolve())


def _index(n: _Node, counters: dict[Kind, int]) -> int:
    """spine2 -> 2, decode3 -> 3: the number a name ends in, else the position among its kind."""
    m = re.fullmatch(r"[a-z]+?([0-9]+)", n.name)
    return int(m.group(1)) if m else counters[n.kind]


def _stp_priority(topo: Topology, n: _Node) -> int | None:
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


def _check_semantics(topo: Topology, source: str) -> None:
    if topo.bgp.hold < 3 * topo.bgp.keepalive:
        raise SpecError(source, "bgp.hold", f"must be at least 3 x bgp.keepalive "
                        f"({3 * topo.bgp.keepalive}) (got {topo.bgp.hold})")
    if (topo.pods is None) != (topo.superspines == 0):
        raise SpecError(source, "superspines" if topo.pods else "pods",
                        "a 3-tier Clos needs both pods and superspines (at least 1 each)")
    if topo.nodes is None and not isinstance(topo.links, Links):
        raise SpecError(source, "links", "a list of links needs nodes: (an explicit fabric); "
                        "otherwise links: is a mapping (speed, mtu, host, leaf_spine, ...)")
    if topo.nodes is not None and isinstance(topo.links, Links):
        raise SpecError(source, "links", "with nodes: (an explicit fabric), links: is the list "
                        "of links, e.g. [{endpoints: [leaf1, spine1]}]")
    h = topo.hosts
    if h.rails > 1 and h.dual_homed:
        raise SpecError(source, "hosts.dual_homed", "a host is either rail-optimized "
                        f"(rails {h.rails}) or dual-homed, not both")
    if topo.fabric is not FabricMode.L3:
        _check_bridged(topo, source)
    nets = {k: ipaddress.IPv4Network(v) for k, v in topo.pools.model_dump().items()}
    if topo.addressing is Addressing.UNNUMBERED:
        nets.pop("fabric")
    for a, na in nets.items():
        for b, nb in nets.items():
            if a < b and na.overlaps(nb):
                raise SpecError(source, f"pools.{b}", f"{nb} overlaps pools.{a} ({na})")


def _check_bridged(topo: Topology, source: str) -> None:
    mode = topo.fabric.value
    two_tier = {"pods": topo.pods is not None, "nodes": topo.nodes is not None,
                "hosts.rails": topo.hosts.rails > 1, "hosts.dual_homed": topo.hosts.dual_homed,
                "links.parallel": isinstance(topo.links, Links) and topo.links.parallel > 1}
    for where, used in two_tier.items():
        if used:
            raise SpecError(source, where, f"fabric {mode} builds a 2-tier Clos of single-homed "
                            "hosts on one link per leaf-spine pair; use fabric l3")
    switches = {f"spine{i}" for i in range(1, topo.spines + 1)} | \
        {f"leaf{i}" for i in range(1, topo.leaves + 1)}
    if topo.fabric is FabricMode.L2:
        if topo.l2.root not in switches:
            raise SpecError(source, "l2.root", f"no such switch; switches are spine1..spine"
                            f"{topo.spines}, leaf1..leaf{topo.leaves}")
        if topo.addressing is Addressing.NUMBERED:
            raise SpecError(source, "addressing", "fabric l2 has no routed links to number; "
                            "use unnumbered (the default) or fabric l3/evpn")
        if topo.bfd.enabled:
            raise SpecError(source, "bfd.enabled", "fabric l2 runs no BGP for BFD to guard; "
                            "set it false or use fabric l3/evpn")
        if topo.asn.overrides:
            raise SpecError(source, "asn.overrides", "fabric l2 runs no BGP")
        if not topo.l2.stp and topo.spines > 1 and not topo.congestion.enabled:
            raise SpecError(source, "l2.stp", f"false with {topo.spines} spines is a loop: a "
                            "broadcast storm from the first frame, as fast as the CPUs go; "
                            "shape every port (congestion: enabled: true) or keep STP on")
    mtu = _links_spec(topo).mtu
    if topo.fabric is FabricMode.EVPN and mtu + VXLAN_OVERHEAD > 65535:
        raise SpecError(source, "links.mtu", f"fabric {mode} carries hosts' frames in VXLAN "
                        f"({VXLAN_OVERHEAD} bytes more): at most {65535 - VXLAN_OVERHEAD}")


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


# -- skeletons ------------------------------------------------------------------

def _tier_link(topo: Topology, a: _Node, b: _Node) -> _Link:
    """A generated link at its tier's speed and MTU (links.per_link applied later)."""
    ls = _links_spec(topo)
    kinds = {a.kind, b.kind}
    tier = ls.host if Kind.HOST in kinds else (
        ls.spine_super if Kind.SUPERSPINE in kinds else ls.leaf_spine)
    return _Link(a.name, b.name, parse_speed(tier.speed or ls.speed), tier.mtu or ls.mtu)


def _roles(topo: Topology, leaves: list[str]) -> dict[str, str]:
    first_half = (len(leaves) + 1) // 2
    roles = {leaf: (Role.PREFILL if i < first_half else Role.DECODE).value
             for i, leaf in enumerate(leaves)}
    roles.update(topo.hosts.roles)
    return roles


def _generated(topo: Topology, source: str) -> _Skeleton:
    """2-tier (spines x leaves) or 3-tier (pods under superspines) Clos, hosts on leaves."""
    pods = topo.pods or 1
    supers = [_Node(f"super{i}", Kind.SUPERSPINE) for i in range(1, topo.superspines + 1)]
    spines = [_Node(f"spine{(p - 1) * topo.spines + i}", Kind.SPINE, pod=topo.pods and p)
              for p in range(1, pods + 1) for i in range(1, topo.spines + 1)]
    leaves = [_Node(f"leaf{(p - 1) * topo.leaves + i}", Kind.LEAF, pod=topo.pods and p)
              for p in range(1, pods + 1) for i in range(1, topo.leaves + 1)]
    ls = _links_spec(topo)
    links = []
    for leaf in leaves:
        for spine in spines:
            if spine.pod == leaf.pod:
                links += [_tier_link(topo, leaf, spine) for _ in range(ls.parallel)]
    links += [_tier_link(topo, spine, sup) for spine in spines for sup in supers]
    _check_host_names(topo, source, [n.name for n in leaves])
    hosts, host_links = _generated_hosts(topo, source, leaves)
    return _Skeleton(supers + spines + leaves + hosts, links + host_links)


def _check_host_names(topo: Topology, source: str, leaves: list[str]) -> None:
    h = topo.hosts
    for where, keys in (("hosts.roles", h.roles), ("hosts.counts", h.counts)):
        for leaf in keys:
            if leaf not in leaves:
                raise SpecError(source, f"{where}.{leaf}", f"no such leaf; leaves are "
                                f"leaf1..leaf{len(leaves)}")
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


def _generated_hosts(topo: Topology, source: str, leaves: list[_Node]
                     ) -> tuple[list[_Node], list[_Link]]:
    h = topo.hosts
    group = h.rails if h.rails > 1 else (2 if h.dual_homed else 1)
    homing = Homing.RAIL if h.rails > 1 else (Homing.DUAL if h.dual_homed else Homing.SINGLE)
    roles = _roles(topo, [n.name for n in leaves])
    counters: dict[str, int] = {}
    hosts: list[_Node] = []
    links: list[_Link] = []
    for g in range(0, len(leaves), group):
        members = leaves[g:g + group]
        role = roles[members[0].name]
        for _ in range(h.counts.get(members[0].name, h.per_leaf)):
            counters[role] = counters.get(role, 0) + 1
            host = _Node(f"{role}{counters[role]}", Kind.HOST, role=role, homing=homing)
            hosts.append(host)
            links += [_tier_link(topo, leaf, host) for leaf in members]
    return hosts, links


def _explicit(topo: Topology, source: str) -> _Skeleton:
    """The escape hatch: `nodes:` and a list of `links:`, checked like generated ones."""
    from .spec import NODE_NAME
    assert topo.nodes is not None and isinstance(topo.links, list)
    nodes: list[_Node] = []
    for name, spec in topo.nodes.items():
        if not re.fullmatch(NODE_NAME, name):
            raise SpecError(source, f"nodes.{name}", "a node name is 1-12 lowercase letters and "
                            "digits, starting with a letter (it names interfaces too)")
        if spec.kind != "host" and (spec.role or spec.attach):
            raise SpecError(source, f"nodes.{name}.{'role' if spec.role else 'attach'}",
                            "only hosts have a role and an attach mode")
        if spec.kind == "host" and spec.asn is not None:
            raise SpecError(source, f"nodes.{name}.asn", "hosts run no BGP")
        nodes.append(_Node(name, Kind(spec.kind), role=spec.role or (
            Role.PREFILL.value if spec.kind == "host" else None), asn=spec.asn))
    index = {n.name: n for n in nodes}
    links: list[_Link] = []
    for i, item in enumerate(topo.links):
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
        links.append(_Link(a, b, parse_speed(item.speed), item.mtu))
    for n in nodes:
        mine = [link for link in links if n.name in (link.a, link.b)]
        if not mine:
            raise SpecError(source, f"nodes.{n.name}", "has no links")
        if n.kind is Kind.HOST:
            attach = topo.nodes[n.name].attach
            if len(mine) > 1 and attach is None:
                raise SpecError(source, f"nodes.{n.name}.attach", f"{len(mine)} links: say rail "
                                "(an address per NIC) or dual (one address over both leaves)")
            if attach == "dual" and len(mine) != 2:
                raise SpecError(source, f"nodes.{n.name}.attach", f"dual needs exactly 2 links "
                                f"(got {len(mine)})")
            peers = [link.a if link.b == n.name else link.b for link in mine]
            if len(set(peers)) != len(peers):
                raise SpecError(source, f"nodes.{n.name}", "has two links to one leaf")
            n.homing = Homing(attach) if len(mine) > 1 and attach else Homing.SINGLE
    return _Skeleton(nodes, links)


# -- knobs ----------------------------------------------------------------------

def _resolve_overrides(topo: Topology, source: str, sk: _Skeleton) -> dict[str, dict[str, Any]]:
    """Every node's routing knobs: the file's globals, then role, group and node overrides."""
    names = {n.name: n for n in sk.nodes}
    kinds = {n.kind.value for n in sk.nodes} | {n.role for n in sk.nodes if n.role}
    for group, members in topo.groups.items():
        if group in names or group in kinds:
            raise SpecError(source, f"groups.{group}", "a group needs a name of its own "
                            "(not a node's, kind's or role's)")
        for m in members:
            if m not in names:
                raise SpecError(source, f"groups.{group}", f"no node {m!r}")
    for key in topo.overrides:
        if key not in names and key not in kinds and key not in topo.groups:
            raise SpecError(source, f"overrides.{key}", "names no node, role (" +
                            ", ".join(sorted(kinds)) + ") or group")
    for node in topo.asn.overrides:
        if node not in names or names[node].kind is Kind.HOST:
            routers = [n.name for n in sk.nodes if n.kind is not Kind.HOST]
            raise SpecError(source, f"asn.overrides.{node}", "no such router; routers are "
                            + _names(routers))
    out = {}
    for n in sk.nodes:
        keys = [n.kind.value] + ([n.role] if n.role else []) + \
            [g for g, members in topo.groups.items() if n.name in members] + [n.name]
        layers = [(k, topo.overrides[k]) for k in keys if k in topo.overrides]
        k: dict[str, Any] = {
            "keepalive": topo.bgp.keepalive, "hold": topo.bgp.hold,
            "maximum_paths": topo.bgp.maximum_paths, "bfd": topo.bfd.enabled,
            "interval_ms": topo.bfd.interval_ms, "multiplier": topo.bfd.multiplier,
            "ecmp_hash": topo.ecmp_hash, "mtu": None, "asn": None, "frr": ""}
        for key, o in layers:
            if n.kind is Kind.HOST:
                for field in ("asn", "frr"):
                    if getattr(o, field) is not None:
                        raise SpecError(source, f"overrides.{key}.{field}", f"{n.name} is a "
                                        "host: it runs no FRR")
            for field, value in (("keepalive", o.bgp.keepalive), ("hold", o.bgp.hold),
                                 ("maximum_paths", o.bgp.maximum_paths), ("bfd", o.bfd.enabled),
                                 ("interval_ms", o.bfd.interval_ms),
                                 ("multiplier", o.bfd.multiplier), ("ecmp_hash", o.ecmp_hash),
                                 ("mtu", o.mtu), ("asn", o.asn)):
                if value is not None:
                    k[field] = value
            if o.frr:
                k["frr"] += o.frr if o.frr.endswith("\n") else o.frr + "\n"
        if k["hold"] < 3 * k["keepalive"]:
            where = next((f"overrides.{key}.bgp" for key, o in reversed(layers)
                          if o.bgp.hold is not None or o.bgp.keepalive is not None), "bgp")
            raise SpecError(source, f"{where}.hold", f"{n.name}: hold {k['hold']} must be at "
                            f"least 3 x keepalive ({3 * k['keepalive']})")
        if topo.fabric is FabricMode.L2 and n.kind is not Kind.HOST and (
                k["frr"] or k["asn"] is not None or k["bfd"]):
            raise SpecError(source, f"overrides.{layers[-1][0] if layers else n.name}",
                            "fabric l2 runs no FRR: no asn, bfd or frr")
        out[n.name] = k
    return out


def _asns(topo: Topology, source: str, sk: _Skeleton, knobs: dict[str, dict[str, Any]]
          ) -> dict[str, int]:
    """RFC 7938: superspines share one ASN, each pod's spines one, every leaf its own."""
    asns: dict[str, int] = {}
    leaves = sk.of(Kind.LEAF)
    leaf_base = topo.asn.leaf_base
    # The default, not "left unset": `up --name` re-validates a dumped spec, where every
    # field reads as set, and a fabric must number the same either way.
    if leaf_base == DEFAULT_LEAF_BASE and leaf_base + len(leaves) - 1 > LAST_PRIVATE_16:
        leaf_base = FIRST_PRIVATE_32  # RFC 6996: past 16-bit private space, the 4-byte one
    for n in sk.nodes:
        if n.kind is Kind.SUPERSPINE:
            asns[n.name] = topo.asn.superspine
        elif n.kind is Kind.SPINE:
            asns[n.name] = topo.asn.spine + ((n.pod or 1) - 1)
        elif n.kind is Kind.LEAF:
            asns[n.name] = leaf_base + leaves.index(n)
        if n.kind is not Kind.HOST:
            asns[n.name] = n.asn or knobs[n.name]["asn"] or topo.asn.overrides.get(n.name) \
                or asns[n.name]
    last = leaves[-1].name if leaves else None
    if last and asns[last] > MAX_ASN:
        raise SpecError(source, "asn.leaf_base", f"{last} would get ASN {asns[last]}: "
                        f"at most {MAX_ASN - len(leaves) + 1} for {len(leaves)} leaves")

    def field_of(name: str) -> str:
        if topo.nodes is not None:
            return f"nodes.{name}.asn"
        base = {Kind.SPINE: "asn.spine", Kind.SUPERSPINE: "asn.superspine"}
        kinds = {n.name: n.kind for n in sk.nodes}
        return f"asn.overrides.{name}" if name in topo.asn.overrides else (
            f"overrides.{name}.asn" if knobs[name]["asn"] is not None
            else base.get(kinds[name], "asn.leaf_base"))

    for name, asn in asns.items():  # a numbering base that runs into a reserved range
        problem = asn_problem(asn) if asn <= MAX_ASN else f"is above {MAX_ASN}"
        if problem:
            raise SpecError(source, field_of(name), f"{name} would get ASN {asn}, which {problem}")

    seen: dict[int, str] = {}
    others: dict[int, str] = {}
    for n in sk.nodes:
        if n.kind in (Kind.SPINE, Kind.SUPERSPINE):
            others.setdefault(asns[n.name], n.name)
    for leaf in leaves:  # RFC 7938: a leaf needs its own ASN or eBGP loop checks drop routes
        asn = asns[leaf.name]
        clash = seen.get(asn) or others.get(asn)
        if clash:
            raise SpecError(source, field_of(leaf.name),
                            f"{leaf.name} would get ASN {asn}, already used by {clash}")
        seen[asn] = leaf.name
    for link in sk.links:
        if link.a in asns and link.b in asns and asns[link.a] == asns[link.b]:
            raise SpecError(source, field_of(link.a), f"{link.a} and {link.b} are linked and "
                            f"share ASN {asns[link.a]}: every session is eBGP")
    return asns


def _take(net: ipaddress.IPv4Network, prefix: int, count: int, source: str, field: str
          ) -> list[ipaddress.IPv4Network]:
    if prefix < net.prefixlen or count > 2 ** (prefix - net.prefixlen):
        raise SpecError(source, field, f"{net} is too small: needs {count} /{prefix} blocks")
    it = net.subnets(new_prefix=prefix)
    return [next(it) for _ in range(count)]


def _loopbacks(topo: Topology, source: str, routers: list[str]) -> dict[str, str]:
    nets = _take(ipaddress.IPv4Network(topo.pools.loopbacks), 32, len(routers) + 1,
                 source, "pools.loopbacks")[1:]  # skip the network address itself
    return {r: str(n.network_address) for r, n in zip(routers, nets)}


# -- wiring ---------------------------------------------------------------------

def _wire(topo: Topology, source: str, sk: _Skeleton, knobs: dict[str, dict[str, Any]]
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


def _per_link(topo: Topology, source: str, sk: _Skeleton) -> dict[frozenset[str], tuple[int, int]]:
    ls = _links_spec(topo)
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


def _host_addresses(topo: Topology, source: str, sk: _Skeleton,
                    ifs: dict[str, list[Interface]]) -> dict[str, dict[str, Any]]:
    """Routed hosts: a /24 of pools.hosts per leaf, a /31 per host NIC in its leaf's /24
    (leaf end .0, host end .1); a dual-homed host's own /32 from the /24 after the leaves'.
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
    rail_of: dict[str, int] = {}
    for h in hosts:
        if h.homing is Homing.RAIL:
            for k, p in enumerate(ifs[h.name]):
                if rail_of.setdefault(p.peer, k) != k:
                    raise SpecError(source, f"nodes.{h.name}", f"its NIC {k} is on {p.peer}, "
                                    f"which other hosts use as rail {rail_of[p.peer]}")
    info: dict[str, dict[str, Any]] = {}
    static: dict[str, list[tuple[str, str]]] = {}
    for h in hosts:
        gws = []
        for i, p in enumerate(ifs[h.name]):
            net = next(free[p.peer], None)
            if net is None:
                raise SpecError(source, "hosts", f"{p.peer} has more than 128 host links")
            gw = str(net[0])
            ifs[h.name][i] = replace(p, address=f"{net[1]}/31")
            leaf_ports = ifs[p.peer]
            j = next(j for j, q in enumerate(leaf_ports) if q.peer == h.name)
            leaf_ports[j] = replace(leaf_ports[j], address=f"{gw}/31")
            gws.append((gw, p.name))
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
    return info


def _segment_addresses(topo: Topology, source: str, sk: _Skeleton,
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
        leaf_ports = ifs[p.peer]
        j = next(j for j, q in enumerate(leaf_ports) if q.peer == h.name)
        leaf_ports[j] = replace(leaf_ports[j], bridged=True)
    return {}
