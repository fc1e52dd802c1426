"""What a collector's parse step produces: metric families, independent of any library.

The exporter turns them into prometheus_client families; `rocelab top`
reads them straight, so the live view and Prometheus always show the same
numbers. Names follow `rocelab_<subsystem>_<name>_<unit>`, counters end in
`_total`.

A histogram family holds `Histogram` values (bucket counts that only grow,
kept by the process that observes: the PFC controller, the engines) and is
exposed as Prometheus' `_bucket{le=...}`, `_count` and `_sum` series.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..plan import Plan

Labels = dict[str, str]


class Kind(str, Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


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


@dataclass
class Family:
    name: str
    kind: Kind
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)
    histograms: list[tuple[Labels, Histogram]] = field(default_factory=list)  # HISTOGRAM only

    def __post_init__(self) -> None:
        if not self.name.startswith("rocelab_"):
            raise ValueError(f"metric {self.name} lacks the rocelab_ prefix")
        if (self.kind is Kind.COUNTER) != self.name.endswith("_total"):
            raise ValueError(f"metric {self.name}: counters, and only counters, end in _total")
        if self.kind is Kind.HISTOGRAM and self.name.endswith(("_bucket", "_count", "_sum")):
            raise ValueError(f"metric {self.name}: a histogram's name takes no series suffix")

    def add(self, labels: Labels, value: float) -> None:
        self.samples.append((labels, float(value)))


class Families:
    """An ordered set of families being built by one parse step."""

    def __init__(self, lab: str):
        self.lab = lab
        self._by_name: dict[str, Family] = {}

    def counter(self, name: str, help_: str) -> Family:
        return self._get(name, Kind.COUNTER, help_)

    def gauge(self, name: str, help_: str) -> Family:
        return self._get(name, Kind.GAUGE, help_)

    def _get(self, name: str, kind: Kind, help_: str) -> Family:
        fam = self._by_name.get(name)
        if fam is None:
            fam = self._by_name[name] = Family(name, kind, help_)
        return fam

    def labels(self, **labels: str) -> Labels:
        """A label set with `lab` first. Build it once and pass it to every metric of
        the same object: the exposition formats each distinct label set once."""
        return {"lab": self.lab, **labels}

    def add(self, kind: Kind, name: str, help_: str, value: float,
            labels: Labels | None = None) -> None:
        """One sample (labels from `labels()`; none given: just the lab)."""
        self._get(name, kind, help_).samples.append((labels or {"lab": self.lab}, float(value)))

    def add_histogram(self, name: str, help_: str, value: Histogram,
                      labels: Labels | None = None) -> None:
        """One histogram (labels as for `add`; never `le`, the exposition adds it)."""
        if labels and "le" in labels:
            raise ValueError(f"{name}: `le` is the histogram's own label")
        self._get(name, Kind.HISTOGRAM, help_).histograms.append(
            (labels or {"lab": self.lab}, value))

    def __iter__(self):
        return iter(self._by_name.values())

    def as_list(self) -> list[Family]:
        return list(self._by_name.values())


def index(families: Iterable[Family]) -> dict[str, Family]:
    return {f.name: f for f in families}


class Source:
    """What every collector shares: its lab's plan, and a source that exists
    unless the collector says when it does not (`applies`)."""

    name = ""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def applies(self) -> bool:
        return True
