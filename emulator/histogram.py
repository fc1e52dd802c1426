"""Bucketed observations that only grow: the histograms a process keeps and scrapes read.

The PFC controller and the engines observe (reaction times, transfer and
handoff durations); the metrics collectors read them back from JSON and the
exporter shows them as Prometheus' `_bucket{le=...}`, `_count` and `_sum`
series. Pure: no I/O, nothing above it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Bucket upper bounds (seconds, wall). Every producer and the docs use these.
PFC_REACTION_BUCKETS = (25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
                        50e-3, 100e-3, 250e-3, 1.0)
TRANSFER_BUCKETS = (1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    30.0, 60.0)


@dataclass
class Histogram:
    """Observations counted per bucket since the observer started (so a true counter).

    `counts[i]` counts values <= bounds[i] and > bounds[i - 1]; the last entry is the
    +Inf bucket. In JSON (pfc.json, an engine's `stats`): {"le": bounds, "counts":
    per-bucket counts, "sum": ..., "count": ...}.
    """

    bounds: tuple[float, ...]
    counts: list[int]
    sum: float = 0.0

    @classmethod
    def empty(cls, bounds: Sequence[float]) -> Histogram:
        return cls(tuple(bounds), [0] * (len(bounds) + 1))

    @property
    def count(self) -> int:
        return sum(self.counts)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1  # le: a bound's own value is in
        self.sum += value

    def cumulative(self) -> list[tuple[float, int]]:
        """(le, observations <= le) for every bound and +Inf: Prometheus' `_bucket` series."""
        out, running = [], 0
        for le, n in zip((*self.bounds, math.inf), self.counts):
            running += n
            out.append((le, running))
        return out

    def to_json(self) -> dict[str, Any]:
        return {"le": list(self.bounds), "counts": list(self.counts), "sum": self.sum,
                "count": self.count}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Histogram:
        bounds, counts = tuple(float(b) for b in d["le"]), [int(c) for c in d["counts"]]
        if (len(counts) != len(bounds) + 1 or list(bounds) != sorted(set(bounds))
                or min(counts, default=0) < 0):
            raise ValueError(f"histogram: {len(bounds)} bounds (sorted, distinct) need "
                             f"{len(bounds) + 1} non-negative counts, got {d!r:.200}")
        return cls(bounds, counts, float(d.get("sum", 0.0)))
