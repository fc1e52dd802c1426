"""Plan compiler: a validated Topology -> a frozen, fully resolved Plan.

Pure and deterministic (no root, no I/O): every name, address, ASN and
interface of the lab is decided here, so render, realize, status and tests
all read the same facts. Semantic problems the schema cannot express (a
role for a leaf that does not exist, a pool too small) are SpecErrors that
name the field.
"""

from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Any

from .congestion.model import CongestionPlan
from .congestion.model import resolve as resolve_congestion
from .errors import SpecError
from .spec import Addressing, FabricMode, Role, Topology
from .units import Dilation, parse_speed

HOST_IFNAME = "eth0"
MAX_ASN = 4294967294  # 4-byte ASNs; 4294967295 is reserved
BRIDGE = "br0"  # the one bridge of a bridging switch (fabric l2; leaves of fabric evpn)
VXLAN_OVERHEAD = 50  # outer Ethernet + IPv4 + UDP + VXLAN: the underlay's MTU is this much larger
STP_PRIORITY_ROOT, STP_PRIORITY_SPINE, STP_PRIORITY_LEAF = 4096, 8192, 32768


class Kind(str, Enum):
    SPINE = "spine"
    LEAF = "leaf"
    HOST = "host"


@dataclass(frozen=True)
class Interface:
    name: str  # on routers: the peer node's name; on hosts: eth0
    peer: str  # peer node
    peer_ifname: str
    address: str | None  # "10.1.0.0/31", or None for an unnumbered fabric port
    fabric: bool  # leaf-spine link (BGP runs over it on a routed fabric)
    port_id: int = 0  # lab-wide port number, 1.. (the BPF dataplane's key)
    bridged: bool = False  # a port of the switch's bridge (fabric l2; evpn leaves' host ports)

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
    role: Role | None = None  # hosts only
    leaf: str | None = None  # hosts only: the leaf it hangs off
    gateway: str | None = None  # hosts only: default route next hop (none on one L2 segment)
    stp_priority: int | None = None  # switches holding a bridge: its STP bridge priority
    index: int = 0  # 1-based position among nodes of its kind (spine2 -> 2)

    @property
    def is_router(self) -> bool:
        return self.kind is not Kind.HOST

    @property
    def address(self) -> str | None:
        """A host's own IPv4 address (no prefix length)."""
        if self.kind is Kind.HOST and self.interfaces[0].address:
            return self.interfaces[0].address.split("/")[0]
        return None

    @property
    def bridge(self) -> str | None:
        """The bridge device of a bridging switch, or None."""
        return BRIDGE if any(p.bridged for p in self.interfaces) else None

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
class Link:
    a: str
    a_ifname: str
    b: str
    b_ifname: str
    fabric: bool


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
    _index: dict[str, Node] = field(default_factory=dict, compare=False, repr=False)

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
    def frr_nodes(self) -> list[Node]:
        """Switches that run FRR: every router, except on a bridged (l2) fabric."""
        return [] if self.fabric is FabricMode.L2 else self.routers

    @property
    def routed(self) -> bool:
        """Does BGP route between leaves (l3, and evpn's underlay)?"""
        return self.fabric is not FabricMode.L2

    def link_mtu(self, link: Link) -> int:
        """A link's MTU: the hosts' MTU, plus the VXLAN header on an EVPN underlay link."""
        return self.mtu + (VXLAN_OVERHEAD if self.fabric is FabricMode.EVPN and link.fabric else 0)

    def fib_targets(self) -> list[tuple[str, str, str | None]]:
        """(prefix, leaf, host) each router's FIB must hold: a host's /31 on l3, a leaf's
        VTEP loopback on evpn, nothing on l2. `host` is None for a loopback."""
        if self.fabric is FabricMode.L3:
            return [(self.host_prefix(h), h.leaf or "", h.name) for h in self.hosts]
        if self.fabric is FabricMode.EVPN:
            return [(f"{leaf.loopback}/32", leaf.name, None) for leaf in self.of_kind(Kind.LEAF)]
        return []

    def fib_prefixes(self, router: Node) -> list[str]:
        """Prefixes `router` must learn through BGP (a leaf: those of other leaves)."""
        return [p for p, leaf, _ in self.fib_targets()
                if router.kind is not Kind.LEAF or leaf != router.name]

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
        return str(ipaddress.IPv4Interface(host.interfaces[0].address).network)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("_index")
        return _jsonable(d)


def _jsonable(v: Any) -> Any:
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def compile_plan(topo: Topology, source: str = "<topology>") -> Plan:
    """The table of contents of planning: names, then numbers, then wiring."""
    _check_semantics(topo, source)
    spines = [f"spine{i}" for i in range(1, topo.spines + 1)]  # stable, simple names
    leaves = [f"leaf{i}" for i in range(1, topo.leaves + 1)]
    routed = topo.fabric is not FabricMode.L2
    asns = _asns(topo, source, spines, leaves) if routed else {}
    loopbacks = _loopbacks(topo, source, spines + leaves) if routed else {}
    fabric_links, fabric_ifs = _fabric(topo, source, spines, leaves)
    host_nodes, host_links, host_ifs = (_hosts(topo, source, leaves)
                                        if topo.fabric is FabricMode.L3
                                        else _segment_hosts(topo, source, leaves))
    nodes = [
        Node(name=r, kind=Kind.SPINE if r in spines else Kind.LEAF, netns=f"{topo.name}-{r}",
             interfaces=tuple(fabric_ifs[r] + host_ifs.get(r, [])), asn=asns.get(r),
             loopback=loopbacks.get(r), index=int(r.removeprefix("spine").removeprefix("leaf")),
             stp_priority=_stp_priority(topo, r))
        for r in spines + leaves
    ]
    nodes = _number_ports(nodes + host_nodes)
    congestion = resolve_congestion(topo, source, set(spines + leaves),
                                    {n.name for n in host_nodes})
    l2 = topo.l2
    return Plan(
        lab=topo.name, addressing=topo.addressing, speed_bps=parse_speed(topo.links.speed),
        mtu=topo.links.mtu, bfd_enabled=topo.bfd.enabled, bfd_interval_ms=topo.bfd.interval_ms,
        bfd_multiplier=topo.bfd.multiplier, bgp_keepalive=topo.bgp.keepalive,
        bgp_hold=topo.bgp.hold, loopback_pool=topo.pools.loopbacks, host_pool=topo.pools.hosts,
        fabric_pool=topo.pools.fabric if topo.addressing is Addressing.NUMBERED else None,
        nodes=tuple(nodes),
        links=tuple(fabric_links + host_links), source=source, congestion=congestion,
        fabric=topo.fabric,
        l2=None if topo.fabric is FabricMode.L3 else L2Plan(
            stp=l2.stp, root=l2.root, forward_delay_s=l2.forward_delay,
            hello_time_s=l2.hello_time, max_age_s=l2.max_age, ageing_time_s=l2.ageing_time,
            mac_table_limit=l2.mac_table_limit, vni=l2.vni),
    )


def _stp_priority(topo: Topology, switch: str) -> int | None:
    """Root first, then the spines, then the leaves: a spanning tree that is predictable."""
    if topo.fabric is not FabricMode.L2:
        return None
    if switch == topo.l2.root:
        return STP_PRIORITY_ROOT
    return STP_PRIORITY_SPINE if switch.startswith("spine") else STP_PRIORITY_LEAF


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
    leaves = {f"leaf{i}" for i in range(1, topo.leaves + 1)}
    routers = leaves | {f"spine{i}" for i in range(1, topo.spines + 1)}
    for leaf in topo.hosts.roles:
        if leaf not in leaves:
            raise SpecError(source, f"hosts.roles.{leaf}",
                            f"no such leaf; leaves are leaf1..leaf{topo.leaves}")
    for node in topo.asn.overrides:
        if node not in routers:
            raise SpecError(source, f"asn.overrides.{node}",
                            f"no such router; routers are spine1..spine{topo.spines}, "
                            f"leaf1..leaf{topo.leaves}")
    if topo.fabric is not FabricMode.L3:
        _check_bridged(topo, source, routers)
    if topo.bgp.hold < 3 * topo.bgp.keepalive:
        raise SpecError(source, "bgp.hold", f"must be at least 3 x bgp.keepalive "
                        f"({3 * topo.bgp.keepalive}) (got {topo.bgp.hold})")
    nets = {k: ipaddress.IPv4Network(v) for k, v in topo.pools.model_dump().items()}
    if topo.addressing is Addressing.UNNUMBERED:
        nets.pop("fabric")
    for a, na in nets.items():
        for b, nb in nets.items():
            if a < b and na.overlaps(nb):
                raise SpecError(source, f"pools.{b}", f"{nb} overlaps pools.{a} ({na})")


def _check_bridged(topo: Topology, source: str, switches: set[str]) -> None:
    mode = topo.fabric.value
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
    if topo.fabric is FabricMode.EVPN and topo.links.mtu + VXLAN_OVERHEAD > 65535:
        raise SpecError(source, "links.mtu", f"fabric {mode} carries hosts' frames in VXLAN "
                        f"({VXLAN_OVERHEAD} bytes more): at most {65535 - VXLAN_OVERHEAD}")

def _asns(topo: Topology, source: str, spines: list[str], leaves: list[str]) -> dict[str, int]:
    asns = {s: topo.asn.spine for s in spines}
    asns.update({leaf: topo.asn.leaf_base + i for i, leaf in enumerate(leaves)})
    asns.update(topo.asn.overrides)
    if asns[leaves[-1]] > MAX_ASN and leaves[-1] not in topo.asn.overrides:
        raise SpecError(source, "asn.leaf_base", f"{leaves[-1]} would get ASN {asns[leaves[-1]]}: "
                        f"at most {MAX_ASN - len(leaves) + 1} for {len(leaves)} leaves")
    seen: dict[int, str] = {}
    for leaf in leaves:  # RFC 7938: a leaf needs its own ASN or eBGP loop checks drop routes
        asn = asns[leaf]
        clash = seen.get(asn) or (spines[0] if asn in {asns[s] for s in spines} else None)
        if clash:
            field = f"asn.overrides.{leaf}" if leaf in topo.asn.overrides else "asn.leaf_base"
            raise SpecError(source, field, f"{leaf} would get ASN {asn}, already used by {clash}")
        seen[asn] = leaf
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


def _fabric(topo: Topology, source: str, spines: list[str], leaves: list[str]
            ) -> tuple[list[Link], dict[str, list[Interface]]]:
    numbered = topo.addressing is Addressing.NUMBERED
    subnets = iter(_take(ipaddress.IPv4Network(topo.pools.fabric), 31, len(spines) * len(leaves),
                         source, "pools.fabric") if numbered else [])
    bridged = topo.fabric is FabricMode.L2
    links: list[Link] = []
    ifs: dict[str, list[Interface]] = {r: [] for r in spines + leaves}
    for leaf in leaves:
        for spine in spines:
            net = next(subnets, None)
            s_addr = f"{net[0]}/31" if net else None
            l_addr = f"{net[1]}/31" if net else None
            ifs[spine].append(Interface(leaf, leaf, spine, s_addr, fabric=True, bridged=bridged))
            ifs[leaf].append(Interface(spine, spine, leaf, l_addr, fabric=True, bridged=bridged))
            links.append(Link(leaf, spine, spine, leaf, fabric=True))
    return links, ifs


def _segment_hosts(topo: Topology, source: str, leaves: list[str]
                   ) -> tuple[list[Node], list[Link], dict[str, list[Interface]]]:
    """Hosts of one stretched L2 segment (fabric l2, evpn): every host an address of
    pools.hosts, no gateway; each leaf's host-facing ports are bridge ports."""
    pool = ipaddress.IPv4Network(topo.pools.hosts)
    count = len(leaves) * topo.hosts.per_leaf
    if pool.num_addresses - 2 < count:
        raise SpecError(source, "pools.hosts", f"{pool} is too small: one segment of "
                        f"{count} hosts needs at least a /{32 - (count + 1).bit_length()}")
    addresses = iter(pool.hosts())
    roles = _roles(topo, leaves)
    counters = {r: 0 for r in Role}
    nodes: list[Node] = []
    links: list[Link] = []
    ifs: dict[str, list[Interface]] = {}
    for leaf in leaves:
        ifs[leaf] = []
        for _ in range(topo.hosts.per_leaf):
            role = roles[leaf]
            counters[role] += 1
            name = f"{role.value}{counters[role]}"
            own = f"{next(addresses)}/{pool.prefixlen}"
            ifs[leaf].append(Interface(name, name, HOST_IFNAME, None, fabric=False, bridged=True))
            nodes.append(Node(
                name=name, kind=Kind.HOST, netns=f"{topo.name}-{name}", role=role, leaf=leaf,
                index=counters[role],
                interfaces=(Interface(HOST_IFNAME, leaf, name, own, False),)))
            links.append(Link(leaf, name, name, HOST_IFNAME, fabric=False))
    return nodes, links, ifs


def _roles(topo: Topology, leaves: list[str]) -> dict[str, Role]:
    first_half = (len(leaves) + 1) // 2
    roles = {leaf: Role.PREFILL if i < first_half else Role.DECODE for i, leaf in enumerate(leaves)}
    roles.update(topo.hosts.roles)
    return roles


def _hosts(topo: Topology, source: str, leaves: list[str]
           ) -> tuple[list[Node], list[Link], dict[str, list[Interface]]]:
    blocks = _take(ipaddress.IPv4Network(topo.pools.hosts), 24, len(leaves), source, "pools.hosts")
    roles = _roles(topo, leaves)
    counters = {r: 0 for r in Role}
    nodes: list[Node] = []
    links: list[Link] = []
    ifs: dict[str, list[Interface]] = {}
    for leaf, block in zip(leaves, blocks):
        ifs[leaf] = []
        for net in list(block.subnets(new_prefix=31))[: topo.hosts.per_leaf]:
            role = roles[leaf]
            counters[role] += 1
            name = f"{role.value}{counters[role]}"
            gw, own = str(net[0]), str(net[1])
            ifs[leaf].append(Interface(name, name, HOST_IFNAME, f"{gw}/31", fabric=False))
            nodes.append(Node(
                name=name, kind=Kind.HOST, netns=f"{topo.name}-{name}", role=role, leaf=leaf,
                gateway=gw, interfaces=(Interface(HOST_IFNAME, leaf, name, f"{own}/31", False),)))
            links.append(Link(leaf, name, name, HOST_IFNAME, fabric=False))
    return nodes, links, ifs
