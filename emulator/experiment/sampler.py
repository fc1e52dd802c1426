"""Counter sampling during an experiment: per (port, TC) queues, marks, pauses."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from typing import Any

from ..congestion.maps import StatsReader
from ..paths import lab_run_dir
from ..plan import Plan

SERIES_KEYS = ("queued", "buffered", "ce_marked", "pause_tx", "tx_bytes", "rx_ce", "ecn_capable")


class Sampler(threading.Thread):
    """Samples the BPF stats map every `interval` s until stopped; keeps active ports only."""

    def __init__(self, plan: Plan, interval: float, t0: float):
        super().__init__(name="sampler", daemon=True)
        self.plan, self.interval, self.t0 = plan, interval, t0
        self.reader = StatsReader(plan)
        self.series: dict[tuple[str, str, int], dict[str, list[tuple[float, int]]]] = \
            defaultdict(lambda: defaultdict(list))
        self.baseline = {(s.node, s.port, s.tc): s.values for s in self.reader.read()}
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        t = round(time.monotonic() - self.t0, 4)
        for s in self.reader.read():
            key = (s.node, s.port, s.tc)
            base = self.baseline[key]
            if s.values["tx_packets"] == base["tx_packets"] and not self.series.get(key):
                continue
            for k in SERIES_KEYS:
                v = s.values[k] - (base[k] if k not in ("queued", "buffered") else 0)
                self.series[key][k].append((t, v))

    def stop(self) -> list[dict[str, Any]]:
        self._halt.set()
        self.join()
        self.sample()
        final = {(s.node, s.port, s.tc): s.values for s in self.reader.read()}
        self.reader.close()
        out = []
        for (node, port, tc), series in sorted(self.series.items()):
            v, b = final[(node, port, tc)], self.baseline[(node, port, tc)]
            out.append({"node": node, "port": port, "tc": tc,
                        "max_queued": v["max_queued"], "max_buffered": v["max_buffered"],
                        **{k: v[k] - b[k] for k in ("tx_packets", "tx_bytes", "ce_marked",
                                                    "ecn_capable", "rx_ce", "pause_tx", "pause_rx")},
                        "series": {k: series[k] for k in SERIES_KEYS}})
        return out


def pfc_snapshot(plan: Plan) -> dict[str, Any]:
    try:
        return json.loads((lab_run_dir(plan.lab) / "pfc.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {"pauses": 0, "reaction_us": [], "paused_s": {}}
