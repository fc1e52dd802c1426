"""What a collector's parse step produces: metric families, independent of any library.

The exporter turns them into prometheus_client families; `rocelab top`
reads them straight, so the live view and Prometheus always show the same
numbers. Names follow `rocelab_<subsystem>_<name>_<unit>`, counters end in
`_total`.

A histogram family holds `histogram.Histogram` values (bucket counts that only
grow, kept by the process that observes: the PFC controller, the engines) and
is exposed as Prometheus' `_bucket{le=...}`, `_count` and `_sum` series.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from ..histogram import Histogram
from ..plan import Plan

Labels = dict[str, str]


class Kind(str, Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


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
