"""One collector per source, each split into an impure `fetch()` and a pure `parse()`.

A collector is a `model.Source` with a `name`, `applies()` (does the source
exist in this lab? by default yes), `fetch()` (raw, capturable data: bytes,
text, JSON) and a static `parse(raw, plan) -> list[Family]`. Fixtures under
tests/unit/fixtures/metrics are `fetch()` outputs captured from a real lab
(`rocelab metrics LAB --capture DIR`).
"""

from __future__ import annotations

from . import bgp, dataplane, engine, events, interface, lab, qdisc, rxe

ALL = (lab.Collector, interface.Collector, qdisc.Collector, dataplane.Collector,
       bgp.Collector, engine.Collector, events.Collector, rxe.Collector)
BY_NAME = {c.name: c for c in ALL}
