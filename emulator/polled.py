"""A named check's result, and what a poll loop over such checks reports as it goes.

`converge.wait` polls the fabric's checks (fib, bgp, evpn, stp, then reach) until all
pass; `Watch` turns each round into progress: routers converged so far, what the
failing checks still miss, an ETA from the rate so far (progress.Phase), then host
pairs answered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .plan import Plan
from .progress import Phase, Progress, steps
from .spec import FabricMode


@dataclass
class CheckResult:
    name: str
    ok: bool
    problems: list[str] = field(default_factory=list)
    # How far along, for progress: of `total` routers (reach: host pairs), `done` pass;
    # `missing`: what is still missing (fib: prefixes, bgp: sessions, reach: pairs).
    done: int = 0
    total: int = 0
    missing: int = 0

    def summary(self) -> str:
        if self.ok:
            return f"{self.name}: ok"
        more = f" (+{len(self.problems) - 3} more)" if len(self.problems) > 3 else ""
        return f"{self.name}: " + "; ".join(self.problems[:3]) + more


MISSING = {"fib": "prefixes missing", "bgp": "sessions not Established",
           "evpn": "leaves missing VTEPs", "stp": "bridges not as planned",
           "reach": "host pairs unanswered"}


def counted(checks: list[CheckResult]) -> str:
    """What the failing checks still miss, and the first problem: `fib: 3100 prefixes
    missing; e.g. super1: 14 prefixes not at the expected width (...)` (pure)."""
    bad = [c for c in checks if not c.ok]
    parts = [f"{c.name}: {c.missing} {MISSING.get(c.name, 'missing')}" for c in bad if c.missing]
    first = next((c.problems[0] for c in bad if c.problems), None)
    return "; ".join(parts + ([f"e.g. {first}"] if first else []))


class Watch:
    """What `wait` reports as it polls: routers converged so far (what is missing, an ETA),
    then host pairs answered. Routing that falls back after reach failed starts again."""

    def __init__(self, plan: Plan, progress: Progress) -> None:
        self.progress = progress
        self.what = "spanning tree" if plan.fabric is FabricMode.L2 else "routing"
        # from the start: a poll of a big fabric takes seconds, and its time counts
        self.routing: Phase | None = steps(progress, self.what, len(plan.frr_nodes or plan.routers),
                                           "routers converged")
        self.reach: Phase | None = None

    def polled(self, checks: list[CheckResult]) -> None:
        bad = next((c for c in checks if not c.ok), None)
        if bad is None:
            return
        if self.routing is None:
            self.routing = steps(self.progress, self.what, bad.total, "routers converged")
        self.routing.total = bad.total  # evpn counts leaves
        self.routing.update(bad.done, counted(checks))

    def converged(self) -> None:
        if self.routing is not None:
            self.routing.update(self.routing.total)
            self.routing.end()
            self.routing = None
        self.progress(f"{self.what} converged; checking host reachability")

    def answered(self, done: int, total: int) -> None:
        if self.reach is None:
            self.reach = steps(self.progress, "reach", total, "host pairs answered")
        self.reach.update(done)

    def reached(self, check: CheckResult) -> None:
        if self.reach is not None:
            self.reach.end("" if check.ok else counted([check]))
            self.reach = None
