"""What a fault is, pure: its target, the links it cuts, the port effects it has.

No root and no I/O: effects.py puts effects in force, inject.py records
faults and is the API. A link fault names its ends (a leaf first when a host
was named first); a node fault is a router. Each cut link gets an effect on
both ends: DROP for a silent fault, DOWN for carrier loss (router ends only:
a host that loses its own eth0 also loses its default route).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple, TypedDict

from ..errors import ExitCode, NodeNotFoundError, RocelabError
from ..plan import Kind, Node, Plan
from ..units import UnitError, parse_percent, parse_speed

MIN_WALL_BPS = 8000  # a gray rate's floor as shaped: the pause switch's own "stopped" rate


class FaultError(RocelabError):
    """A fault cannot be injected or healed as asked (unknown target, not failed, ...)."""


class FaultTargetError(FaultError, NodeNotFoundError):
    """The fault names a node or link the lab does not have (exit 4, as any unknown node)."""

    exit_code = ExitCode.NOT_FOUND


class EffectKind(str, Enum):
    DOWN = "down"
    DROP = "drop"
    LOSS = "loss"  # gray: a share of the frames arriving on the port dropped at random
    CORRUPT = "corrupt"  # gray: a share of the RoCE frames arriving altered (bad ICRC)
    RATE = "rate"  # gray: the port sends at most `value` bits per second (wall, as shaped)


class Effect(NamedTuple):
    kind: EffectKind
    node: str
    port: str
    value: str = ""  # gray effects: the percentage ("1.5") or the rate in (wall) bit/s

    def __str__(self) -> str:
        how = f" {self.value}{'%' if self.kind is not EffectKind.RATE else ' bit/s'}" if self.value else ""
        return f"{self.kind.value} {self.node}:{self.port}{how}"


class FaultKind(str, Enum):
    LINK = "link"
    NODE = "node"
    PLANE = "plane"  # every spine of one plane of a multi-plane fabric (`a`: the plane index)


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    a: str  # link: the first end named (the leaf if a host was named first); node: the node;
    # plane: the plane's index, as text ("1")
    b: str | None = None  # link: the other end
    silent: bool = False
    # A gray link fault (the link stays up, routing keeps it): any of these, on both ends.
    loss_pct: float | None = None  # frames dropped at random, in each direction
    corrupt_pct: float | None = None  # RoCE frames altered in flight: the receiver's ICRC fails
    rate_bps: int | None = None  # each end sends at most this (a degraded optic)

    @property
    def gray(self) -> bool:
        return any(v is not None for v in (self.loss_pct, self.corrupt_pct, self.rate_bps))

    @property
    def name(self) -> str:
        return f"link {self.a}-{self.b}" if self.kind is FaultKind.LINK else f"{self.kind.value} {self.a}"

    def how(self) -> str:
        """What a gray or silent fault does, "loss 1%, rate 500 Mbit/s" ("": carrier loss)."""
        parts = [f"loss {_pct(self.loss_pct)}%" if self.loss_pct is not None else "",
                 f"corrupt {_pct(self.corrupt_pct)}%" if self.corrupt_pct is not None else "",
                 f"rate {self.rate_bps / 1e6:g} Mbit/s" if self.rate_bps is not None else "",
                 "silent" if self.silent else ""]
        return ", ".join(p for p in parts if p)

    def describe(self) -> str:
        """The name and, for a gray or silent fault, what it does: "link leaf1-spine1 (loss 1%)"."""
        return f"{self.name} ({self.how()})" if self.how() else self.name

    def to_json(self) -> dict[str, Any]:
        where: dict[str, Any] = {"a": self.a, "b": self.b} if self.kind is FaultKind.LINK else (
            {"plane": int(self.a)} if self.kind is FaultKind.PLANE else {"node": self.a})
        gray = {k: v for k, v in (("loss_pct", self.loss_pct), ("corrupt_pct", self.corrupt_pct),
                                  ("rate_bps", self.rate_bps)) if v is not None}
        return {"fault": self.kind.value, **where, "silent": self.silent} | gray

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Fault:
        kind = FaultKind(d["fault"])
        a = d["a"] if kind is FaultKind.LINK else (
            str(d["plane"]) if kind is FaultKind.PLANE else d["node"])
        return cls(kind, a, d.get("b"), bool(d.get("silent", False)), d.get("loss_pct"),
                   d.get("corrupt_pct"), d.get("rate_bps"))

    def same_target(self, other: Fault) -> bool:
        return self.kind is other.kind and {self.a, self.b} == {other.a, other.b}


class AfterState(TypedDict):
    """What routing must converge to once an event is in force."""

    faults: list[str]  # every fault then active, e.g. "link leaf1-spine2 (silent)"
    cut_links: list[list[str]]  # [a, b] pairs whose routes go
    failed_nodes: list[str]


class Convergence(TypedDict):
    """How routing followed one event (faults.convergence); times in seconds after it."""

    event: str
    action: str
    detect_s: float | None  # first FIB change on any router (None: none)
    converge_s: float | None  # last change after which every router held the expected FIB
    settled: bool
    routers_changed: list[str]
    leaf_ecmp: dict[str, list[int]]  # leaf -> [min, max] width toward remote hosts


class Stamp(TypedDict):
    time: float  # wall clock, Unix seconds
    iso: str  # the same, ISO 8601 UTC with milliseconds
    monotonic: float  # the clock convergence is measured on


class FaultEvent(Stamp, total=False):
    """A fail (`rocelab fail --json`, `faults.fail`), as recorded in faults.json."""

    action: str  # "fail"
    fault: str  # "link" | "node"
    a: str  # link faults: the ends
    b: str
    node: str  # node faults
    plane: int  # plane faults: the plane (0-based) whose spines all failed
    silent: bool
    name: str  # "link leaf1-spine2", "node spine1"
    inject_s: float  # how long putting the effects in force took
    effects: list[str]  # "down leaf1:spine2", "drop spine2:leaf1", ...
    after: AfterState
    convergence: Convergence  # added by `fail` unless --no-wait


class HealEvent(Stamp, total=False):
    """A heal (`rocelab heal --json`, `faults.heal`)."""

    action: str  # "heal"
    target: str  # "all" or the fault's name
    inject_s: float
    healed: list[dict[str, Any]]  # the fault records lifted
    effects: list[str]
    after: AfterState
    convergence: Convergence


class FlapEvent(Stamp, total=False):
    """A flap (`rocelab fail LAB flap A B`, `faults.flap`): every fail and heal in order."""

    action: str  # "flap"
    fault: str
    a: str
    b: str
    silent: bool
    name: str
    period_s: float
    count: int
    cycles: int
    transitions: list[FaultEvent | HealEvent]
    convergence: list[Convergence]


def link_fault(plan: Plan, a: str, b: str, silent: bool = False, loss_pct: float | None = None,
               corrupt_pct: float | None = None, rate_bps: int | None = None) -> Fault:
    """The fault on the link a-b (named leaf first when a is a host); gray with any of
    loss_pct, corrupt_pct (0 < p <= 100) or rate_bps (> 0), which exclude `silent`."""
    na, _ = _node(plan, a, plan.nodes), _node(plan, b, plan.nodes)
    peers = [i.peer for i in na.interfaces]
    if b not in peers:
        raise FaultTargetError(f"lab {plan.lab} has no link {a}-{b}; {a} is linked to {', '.join(peers)}")
    for field, pct in (("loss", loss_pct), ("corrupt", corrupt_pct)):
        if pct is not None and not 0 < pct <= 100:
            raise FaultError(f"{field}: a percentage above 0 and at most 100 (got {pct:g})")
    if rate_bps is not None and rate_bps < 8:
        raise FaultError(f"rate: a speed above 0 such as 10G or 500M (got {rate_bps})")
    if rate_bps is not None:
        rate_bps -= rate_bps % 8  # the kernel keeps bytes per second
    fault = Fault(FaultKind.LINK, *((b, a) if not na.is_router else (a, b)), silent=silent,
                  loss_pct=loss_pct, corrupt_pct=corrupt_pct, rate_bps=rate_bps)
    if fault.gray and silent:
        raise FaultError("silent: a silent fault drops every frame; loss, corrupt and rate "
                         "degrade a link that stays up -- give one or the other")
    if rate_bps is not None and plan.congestion:
        _check_shaped_rate(plan, fault.a, fault.b or "", rate_bps)
    return fault


def _check_shaped_rate(plan: Plan, a: str, b: str, rate_bps: int) -> None:
    """On a shaped lab a gray rate is real-equivalent, like the link's speed: below that
    speed, and not so low that the port, shaped at rate / D, would stand still."""
    speed = min(p.speed_bps for p in plan.node(a).ports_to(b))
    if rate_bps >= speed:
        raise FaultError(f"rate: below the link's speed {speed / 1e9:g}G on shaped lab "
                         f"{plan.lab} (rates are real-equivalent, like link speeds; got "
                         f"{rate_bps / 1e9:g}G)")
    if wall_rate(plan, rate_bps) < MIN_WALL_BPS:
        raise FaultError(f"rate: at least {MIN_WALL_BPS * plan.dilation / 1e6:g}M on lab "
                         f"{plan.lab} (dilation {plan.dilation:g}: shaped at rate / "
                         f"{plan.dilation:g}; got {rate_bps / 1e6:g}M)")


def wall_rate(plan: Plan, rate_bps: int) -> int:
    """A gray rate as the port is shaped: real-equivalent / D on a shaped lab (as link
    speeds are), in whole bytes per second (what the kernel keeps)."""
    wall = int(plan.dilation.wall_bps(rate_bps))
    return wall - wall % 8


def real_rate(plan: Plan, wall_bps: int) -> int:
    """The real-equivalent rate of a port shaped at `wall_bps` (wall_rate's inverse)."""
    return round(wall_bps * plan.dilation)


def node_fault(plan: Plan, name: str, silent: bool = False) -> Fault:
    node = _node(plan, name, plan.routers)
    if not node.is_router:
        raise FaultError(f"{name} is a host: fail its link instead (fail link {node.leaf} {name})")
    return Fault(FaultKind.NODE, name, silent=silent)


def plane_fault(plan: Plan, plane: object, silent: bool = False) -> Fault:
    """Every spine of plane `plane` (0-based) of a multi-plane fabric; FaultTargetError
    naming `plane` and the range the lab has."""
    if plan.planes < 2:
        raise FaultTargetError(f"plane: lab {plan.lab} has one plane (topology planes: 1); "
                               "fail a node or a link instead")
    try:
        k = int(str(plane), 10)
    except ValueError:
        k = -1
    if not 0 <= k < plan.planes:
        raise FaultTargetError(f"plane: {str(plane)[:20]!r} is not a plane of lab {plan.lab}; "
                               f"planes are 0..{plan.planes - 1}")
    return Fault(FaultKind.PLANE, str(k), silent=silent)


def failed_routers(plan: Plan, fault: Fault) -> list[str]:
    """The routers a fault takes out whole: a node, or every spine of a plane."""
    if fault.kind is FaultKind.NODE:
        return [fault.a]
    if fault.kind is FaultKind.PLANE:
        return [n.name for n in plan.plane_nodes(int(fault.a)) if n.kind is Kind.SPINE]
    return []


def _node(plan: Plan, name: str, candidates: Sequence[Node]) -> Node:
    """The node `name`; FaultTargetError naming the `candidates` (routers, or every node)."""
    try:
        return plan.node(name)
    except KeyError:
        what = "routers" if all(n.is_router for n in candidates) else "nodes"
        raise FaultTargetError(f"no node {name!r} in lab {plan.lab}; {what}: "
                               f"{', '.join(n.name for n in candidates)}") from None


def link_alive(after: Mapping[str, Any]) -> Callable[[str, str], bool]:
    """Whether the link x-y still carries routes once `after` (an AfterState) is in force:
    it is not cut and neither end is a failed node."""
    cut = {frozenset(link) for link in after.get("cut_links", [])}
    dead = set(after.get("failed_nodes", []))
    return lambda x, y: frozenset((x, y)) not in cut and x not in dead and y not in dead


def links_of(plan: Plan, fault: Fault) -> list[tuple[str, str]]:
    """The links a fault cuts, as (fault end, far end)."""
    if fault.kind is FaultKind.LINK:
        return [(fault.a, fault.b or "")]
    return [(r, i.peer) for r in failed_routers(plan, fault) for i in plan.node(r).interfaces]


def gray_args(loss: str | float | None, corrupt: str | float | None,
              rate: str | None) -> dict[str, Any]:
    """link_fault's gray keyword arguments from user text ("1%", "0.5", "10G"); FaultError
    naming the field."""
    try:
        return {"loss_pct": None if loss is None else parse_percent(loss, "loss"),
                "corrupt_pct": None if corrupt is None else parse_percent(corrupt, "corrupt"),
                "rate_bps": None if rate is None else parse_speed(rate, "rate")}
    except UnitError as e:
        raise FaultError(str(e)) from None


def gray_effects(fault: Fault, plan: Plan) -> list[tuple[EffectKind, str]]:
    """(kind, value) of a gray fault's effects, on each end of its link: a rate as the
    ports are shaped (wall bit/s, `wall_rate`)."""
    out = []
    if fault.loss_pct is not None:
        out.append((EffectKind.LOSS, _pct(fault.loss_pct)))
    if fault.corrupt_pct is not None:
        out.append((EffectKind.CORRUPT, _pct(fault.corrupt_pct)))
    if fault.rate_bps is not None:
        out.append((EffectKind.RATE, str(wall_rate(plan, fault.rate_bps))))
    return out


def _pct(p: float) -> str:
    return f"{p:g}"


def effects_of(plan: Plan, fault: Fault) -> set[Effect]:
    """Both ends of every link the fault cuts: DROP (silent), or DOWN on the router ends;
    a gray fault's effects on both ends of its link (hosts too)."""
    if fault.gray:
        a, b = fault.a, fault.b or ""
        return {Effect(kind, node, port, value) for kind, value in gray_effects(fault, plan)
                for port_a in plan.node(a).ports_to(b)
                for node, port in ((a, port_a.name), (b, port_a.peer_ifname))}
    kind = EffectKind.DROP if fault.silent else EffectKind.DOWN
    out = set()
    for a, b in set(links_of(plan, fault)):
        for port_a in plan.node(a).ports_to(b):  # every parallel link between the two
            for node, port in ((a, port_a.name), (b, port_a.peer_ifname)):
                if fault.silent or plan.node(node).is_router:
                    out.add(Effect(kind, node, port))
    return out


def after_state(plan: Plan, faults: list[Fault]) -> AfterState:
    """What routing should converge to: links whose routes go (a silent host
    link keeps its connected route, so it does not count) and failed nodes."""
    cut = set()
    for f in faults:
        if f.gray:  # the link stays up and routing keeps it
            continue
        for a, b in links_of(plan, f):
            fabric = plan.node(a).is_router and plan.node(b).is_router
            if fabric or not f.silent:
                cut.add(tuple(sorted((a, b))))
    return {"faults": [f.describe() for f in faults],
            "cut_links": [list(c) for c in sorted(cut)],
            "failed_nodes": sorted({r for f in faults for r in failed_routers(plan, f)})}
