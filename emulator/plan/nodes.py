"""The plan's parts: a node and its interfaces, a link, a host route, the L2 settings.

Frozen like the Plan that holds them (records.py); below both the Plan and the
routing model (routing.py), which read them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spec import EcmpHash, HostKind
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
    plane: int | None = None  # planes > 1: the plane (0-based) of a spine or leaf; else None

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
