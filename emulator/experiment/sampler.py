"""Counter sampling during an experiment: per (port, TC) queues, marks, pauses."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from typing import Any, cast

from ..congestion.maps import StatsReader, peer_faces_host
from ..metrics.snapshot import SERIES_KEYS, PortSample, PortSeries, port_sample
from ..paths import lab_run_dir
from ..plan import Plan


class Sampler(threading.Thread):
    """Samples the BPF stats map every `interval` s until stopped; keeps active ports only."""

    def __init__(self, plan: Plan, interval: float, t0: float):
        super().__init__(name="sampler", daemon=True)
        self.plan, self.interval, self.t0 = plan, interval, t0
        self.reader = StatsReader(plan)
        self.series: dict[tuple[str, str, int], dict[str, list[tuple[float, int]]]] = \
            defaultdict(lambda: defaultdict(list))
        self.baseline = {(s.node, s.port, s.tc): s.values for s in self.reader.read()}
        self.trims: dict[str, int] = {}  # filled by stop(): trims(...)
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        t = round(time.monotonic() - self.t0, 4)
        for s in self.reader.read():
            key = (s.node, s.port, s.tc)
            base = self.baseline[key]
            if (s.values["tx_packets"] == base["tx_packets"] and s.values["trim"] == base["trim"]
                    and not self.series.get(key)):  # idle (a class that trimmed all is not)
                continue
            for k in SERIES_KEYS:
                v = s.values[k] - (base[k] if k not in ("queued", "buffered") else 0)
                self.series[key][k].append((t, v))

    def stop(self) -> list[PortSample]:
        self._halt.set()
        self.join()
        self.sample()
        final = {(s.node, s.port, s.tc): s.values for s in self.reader.read()}
        self.reader.close()
        self.trims = trims(self.plan, self.baseline, final)
        return [port_sample(*key, self.baseline[key], final[key],
                            cast(PortSeries, {k: series[k] for k in SERIES_KEYS}))
                for key, series in sorted(self.series.items())]


TRIM_FIELDS = ("trim", "tx_trim", "dropped_trim")


def trims(plan: Plan, start: dict[tuple[str, str, int], dict[str, int]],
          end: dict[tuple[str, str, int], dict[str, int]]) -> dict[str, int]:
    """Packets the switches trimmed during the run, every port and class (SONiC's trim,
    tx_trim, dropped_trim), and where: `last_hop` at ports facing a host, `fabric` elsewhere."""
    out = dict.fromkeys(TRIM_FIELDS + ("last_hop", "fabric"), 0)
    for (node, port, tc), e in end.items():
        s = start.get((node, port, tc), {})
        grew = {f: e.get(f, 0) - s.get(f, 0) for f in TRIM_FIELDS}
        for f in TRIM_FIELDS:
            out[f] += grew[f]
        iface = next((i for i in plan.node(node).interfaces if i.name == port), None)
        where = "last_hop" if iface is not None and peer_faces_host(plan, iface) else "fabric"
        out[where] += grew["trim"]
    return out


def pfc_snapshot(plan: Plan) -> dict[str, Any]:
    try:
        return json.loads((lab_run_dir(plan.lab) / "pfc.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {"pauses": 0, "reaction_us": [], "paused_s": {}}
