"""What `rocelab status` reports: per router sessions, prefixes and ECMP width."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from . import converge, faults, netns
from .errors import RocelabError
from .plan import Kind, Node, Plan


@dataclass
class RouterStatus:
    node: str
    kind: str
    asn: int | None
    sessions_up: int
    sessions_configured: int
    prefixes_received: int
    ecmp_min: int  # toward the host prefixes it must learn (0 = some missing)
    ecmp_max: int
    ecmp_expected: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        return (self.error is None and self.sessions_up == self.sessions_configured
                and self.ecmp_min == self.ecmp_expected)


def router_status(plan: Plan, node: Node) -> RouterStatus:
    configured = sum(1 for i in node.interfaces if i.fabric)
    widths = list(converge.fib_widths_of(plan, node).values()) or [0]
    base = dict(node=node.name, kind=node.kind.value, asn=node.asn, sessions_configured=configured,
                ecmp_min=min(widths), ecmp_max=max(widths),
                ecmp_expected=converge.expected_width(plan, node))
    if not netns.exists(node.netns):
        return RouterStatus(**base, sessions_up=0, prefixes_received=0, error="namespace missing")
    try:
        peers = converge.bgp_sessions(plan, node)
    except RocelabError as e:
        return RouterStatus(**base, sessions_up=0, prefixes_received=0, error=str(e))
    up = sum(1 for p in peers.values() if p["state"] == "Established")
    rx = sum(int(p["prefixes"] or 0) for p in peers.values())
    return RouterStatus(**base, sessions_up=up, prefixes_received=rx)


def lab_status(plan: Plan, reach_timeout_s: float = 1.0) -> dict[str, Any]:
    routers: list[RouterStatus] = netns.parallel(lambda n: router_status(plan, n), plan.routers)  # type: ignore
    reach = converge.check_reach(plan, reach_timeout_s) if all(r.ok for r in routers) else None
    return {
        "lab": plan.lab,
        "converged": all(r.ok for r in routers) and bool(reach and reach.ok),
        "addressing": plan.addressing.value,
        "routers": [asdict(r) | {"ok": r.ok} for r in routers],
        "hosts": [{"node": h.name, "role": h.role.value if h.role else None, "leaf": h.leaf,
                   "address": h.address} for h in plan.hosts],
        "reachability": None if reach is None else {"ok": reach.ok, "problems": reach.problems},
        "faults": faults.active(plan),  # injected by `rocelab fail`, or found in the kernel
        "spines": len(plan.of_kind(Kind.SPINE)),
        "leaves": len(plan.of_kind(Kind.LEAF)),
    }
