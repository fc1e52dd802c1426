"""rocelab diagnose: ranked root causes from a lab's counters (docs/diagnose.md).

    ev = evidence.collect(plan, 30.0)            # or evidence.from_results(json, path)
    findings = diagnose(ev, flow="victim")        # most likely cause first
"""

from __future__ import annotations

from typing import Any

from ..errors import RocelabError
from . import rules
from .evidence import Evidence
from .rules import Finding, Severity

KINDS = ("pause-storm", "ecn-off", "dcqcn-off-host", "ecmp-collision", "congested-spine",
         "routing", "gray-link", "lossless-drops", "mtu-mismatch",
         "trimming-hotspot")


def diagnose(ev: Evidence, flow: str | None = None, src: str | None = None,
             dst: str | None = None) -> list[Finding]:
    """Every rule's findings, most likely root cause first; narrowed to one flow's path."""
    found: list[Finding] = []
    for rule in rules.RULES:
        found += rule(ev)
    collided = {w for f in found if f.kind == "ecmp-collision" for w in f.where if ":" in w}
    found += rules.congested_spine(ev, skip=collided)
    silent = rules.silent_links(ev)  # a dead link is routing's, not a gray link's
    found += silent + rules.gray_link(ev, {frozenset(f.where[:2]) for f in silent})
    if flow or src or dst:
        found = [f for f in found if _concerns(ev, f, _select(ev, flow, src, dst))]
    found.sort(key=lambda f: (-f.severity, -f.score, f.kind, f.cause))
    return found


def _select(ev: Evidence, flow: str | None, src: str | None, dst: str | None
            ) -> dict[str, Any]:
    """The flow(s) a user asked about, as names, hosts and the egress ports they use."""
    if flow:
        chosen = [f for f in ev.flows if f["name"] == flow]
        if not chosen:
            known = ", ".join(sorted({f["name"] for f in ev.flows})) or "none recorded"
            raise RocelabError(f"--flow: no flow {flow!r} in the evidence; flows: {known}")
    else:
        chosen = [f for f in ev.flows if (not src or f["src"] == src)
                  and (not dst or f["dst"] == dst)]
        if not chosen:  # live: no recorded flows, the pair's edge ports stand for its path
            chosen = [{"name": f"{src}->{dst}", "src": src or "", "dst": dst or "",
                       "spines": sorted(n for n, k in ev.kinds.items() if k == "spine")}]
    hops = set().union(*(rules.flow_hops(ev, f) for f in chosen))
    nodes = {h.split(":", 1)[0] for h in hops}
    return {"names": {f["name"] for f in chosen},
            "hosts": {h for f in chosen for h in (f["src"], f["dst"]) if h},
            "hops": hops, "nodes": nodes}


def _concerns(ev: Evidence, f: Finding, sel: dict[str, Any]) -> bool:
    """A finding is on the path if it names the flow or one of its hosts, one of the
    ports it leaves through, or has its main node (where[0]) on the path."""
    if set(f.affected.get("flows", [])) & sel["names"]:
        return True
    if set(f.affected.get("hosts", [])) & sel["hosts"]:
        return True
    if f.where and (f.where[0] in sel["nodes"] or f.where[0] in sel["hosts"]):
        return True
    return any(w in sel["hops"] for w in f.where)


def worst(findings: list[Finding]) -> Severity:
    return max((f.severity for f in findings), default=Severity.INFO)


__all__ = ["KINDS", "Evidence", "Finding", "Severity", "diagnose", "worst"]
