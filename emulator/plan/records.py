"""The plan's frozen record: a Plan, which holds its nodes, links and routes (nodes.py).

Fully resolved and never mutated: compile_plan (compiler.py) builds them from a
strict Topology; render, realize, status and the tests all read the same facts.
The routing model the Plan answers for (fib_targets, expected_widths, stp_tree)
is computed in routing.py.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from ..spec import Addressing, FabricMode
from ..units import Dilation
from . import routing
from .congestion import CongestionPlan
from .kinds import Homing, Kind
from .nodes import VXLAN_OVERHEAD, Interface, L2Plan, Link, Node


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
    aggregates: tuple[tuple[str, str], ...] = ()  # (leaf, the /24 it announces for its hosts)
    planes: int = 1  # parallel planes: plane k its own Clos, NIC k of every host on it
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

    def aggregate_of(self, node: Node) -> str | None:
        """The /24 a leaf announces for all its hosts (bgp.aggregate_hosts), else None."""
        return dict(self.aggregates).get(node.name)

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
        if self.planes > 1:
            return (f"{self.planes} planes of {len(self.spines) // self.planes} spines x "
                    f"{len(self.leaf_nodes) // self.planes} leaves")
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
        """Prefixes `router` must learn through BGP (not those it originates itself; on a
        multi-plane fabric only its own plane's)."""
        return [p for p, origins in self.fib_targets()
                if router.name not in {leaf for leaf, _ in origins}
                and (router.plane is None or any(self.node(leaf).plane == router.plane
                                                 for leaf, _ in origins))]

    def plane_nodes(self, plane: int) -> list[Node]:
        """The spines and leaves of plane `plane` (0-based; [] on a single-plane fabric)."""
        return [n for n in self.routers if n.plane == plane]

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
        if self.planes == 1:  # a single-plane plan reads as it always has
            d.pop("planes")
            for node in d["nodes"]:
                node.pop("plane")
        return _jsonable(d)


def _jsonable(v: Any) -> Any:
    if isinstance(v, Enum):
        return v.value
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v

