"""Summary statistics every layer shares: percentiles, handoff tails, fairness.

Pure numbers with nothing above them, so a workload summary, an
experiment's analysis and a report all compute a p99 the same way.
"""

from __future__ import annotations

from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank q-th percentile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def p50_p99(values: Sequence[float], digits: int | None = None
            ) -> tuple[float | None, float | None]:
    """The median and 99th percentile of handoff (or any) durations, rounded to `digits`
    when given; (None, None) for no values."""
    if not values:
        return None, None
    p50, p99 = percentile(values, 50), percentile(values, 99)
    return (p50, p99) if digits is None else (round(p50, digits), round(p99, digits))


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 = perfectly fair, 1/n = one flow takes all."""
    vals = [v for v in values]
    if not vals or sum(vals) == 0:
        return 0.0
    return sum(vals) ** 2 / (len(vals) * sum(v * v for v in vals))
