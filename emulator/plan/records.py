"""The plan's frozen records: a Plan and its nodes, interfaces, links and routes.

Fully resolved and never mutated: compile_plan (compiler.py) builds them from a
strict Topology; render, realize, status and the tests all read the same facts.
The routing model the Plan answers for (fib_targets, expected_widths, stp_tree)
is computed in routing.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from ..spec import Addressing, EcmpHash, FabricMode, HostKind
from ..units import Dilation
from . import routing
from .congestion import CongestionPlan
from .kinds import Homing, Kind

HOST_IFNAME = "eth0"
BRIDGE = "br0"  # the one bridge of a bridging switch (fabric l2; leaves of fabric evpn)
VXLAN_OVERHEAD = 50  # outer Ethernet + IPv4 + UDP + VXLAN: the underlay's MTU is this much larger


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
    _targets: list[routing.Target] = field(
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

    def fib_targets(self) -> list[routing.Target]:
        """(prefix, origins) each router's FIB must hold (routing.fib_targets), once."""
        if not self._targets:
            self._targets.extend(routing.fib_targets(self))
        return list(self._targets)

    def fib_prefixes(self, router: Node) -> list[str]:
        """Prefixes `router` must learn through BGP (not those it originates itself)."""
        return [p for p, origins in self.fib_targets()
                if router.name not in {leaf for leaf, _ in origins}]

    def expected_widths(self, cut: routing.Cut = frozenset(),
                        dead: frozenset[str] = frozenset()) -> dict[str, dict[str, int]]:
        """router -> prefix -> the next hops BGP installs (0: no route), around `cut` links
        and `dead` nodes (routing.expected_widths); the healthy fabric's computed once."""
        if cut or dead:
            return routing.expected_widths(self, cut, dead)
        if not self._healthy:
            self._healthy.update(routing.expected_widths(self))
        return {r: dict(w) for r, w in self._healthy.items()}

    def stp_tree(self, cut: routing.Cut = frozenset(),
                 dead: frozenset[str] = frozenset()) -> dict[str, dict[str, str]]:
        """switch -> port -> forwarding, blocking or disabled: the tree 802.1D settles on
        (fabric l2), around `cut` links and `dead` switches (routing.stp_tree)."""
        return routing.stp_tree(self, cut, dead)

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
        return routing.network(host.interfaces[0].address or "")

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("_index")
        d.pop("_healthy")
        d.pop("_targets")
        return _jsonable(d)


def _jsonable(v: Any) -> Any:
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v

