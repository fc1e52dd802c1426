"""What `rocelab transfer`/`kv --out DIR` record while they run, for results.json and the report.

The same counters an experiment samples (congestion labs: every port's
queues, marks and pauses every 100 ms; PFC totals before and after) and the
workload's own progress as a rate series, so one report pipeline serves
`run`, `transfer` and `kv`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ..experiment.sampler import Sampler, pfc_snapshot
from ..experiment.series import rates
from ..metrics.collectors import interface
from ..metrics.snapshot import PortSample
from ..plan import Plan
from ..plan.congestion import ROCE_TC
from .data import binned

SAMPLE_EVERY_S = 0.1
RATE_BIN_S = 0.25


class Recorder:
    def __init__(self, plan: Plan, interval: float = SAMPLE_EVERY_S):
        self.plan, self.interval = plan, interval
        self.series: list[tuple[float, float]] = []
        self.t0 = 0.0
        self.sampler: Sampler | None = None
        self.ports: list[PortSample] = []
        self.pfc0: dict[str, Any] = {}
        self.pfc1: dict[str, Any] = {}
        self.sent0: dict[str, float] = {}
        self.link_bytes: dict[str, float] = {}
        self.elapsed = 0.0

    def __enter__(self) -> Recorder:
        self.sent0 = port_bytes(self.plan)
        self.t0 = time.monotonic()
        self.series.append((0.0, 0))
        self.pfc0 = pfc_snapshot(self.plan)
        if self.plan.congestion:
            self.sampler = Sampler(self.plan, self.interval, self.t0)
            self.sampler.start()
        return self

    def tick(self, done: int, _total: int = 0, sent: int | None = None) -> None:
        """A progress callback: bytes put on the wire (or completed) so far."""
        self.series.append((round(time.monotonic() - self.t0, 4), sent if sent is not None else done))

    def also(self, progress: Callable[..., None]) -> Callable[..., None]:
        """A progress callback that feeds `progress` and this recorder."""
        def both(*args: int) -> None:
            progress(*args)
            self.tick(*args)
        return both

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.monotonic() - self.t0
        if self.sampler:
            self.ports = self.sampler.stop()
        self.pfc1 = pfc_snapshot(self.plan)
        sent1 = port_bytes(self.plan)
        self.link_bytes = {k: v - self.sent0.get(k, 0) for k, v in sent1.items()}

    def results(self, kind: str, res: Mapping[str, Any], flow: dict[str, str],
                senders: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        """The command's own JSON plus the keys every report reads (see report/data.py).

        `senders` [(src, dst)]: on congestion labs, one flow per sending host from
        its port's sampled RoCE-class bytes; otherwise one flow from `tick`s."""
        cp = self.plan.congestion
        paused0 = self.pfc0.get("paused_s", {})
        total = res.get("bytes") or res.get("aggregate", {}).get("bytes", 0)
        ticks = self.series + [(round(self.elapsed, 4), total)]  # a run too short for any tick
        flows = self._per_sender(senders or []) or [flow | {"rate_series": rates(
            binned(sorted(ticks), RATE_BIN_S))}]
        return dict(res) | {
            "kind": kind, "lab": self.plan.lab, "dilation": self.plan.dilation,
            "link_rate_bps": cp.rate_of(self.plan.speed_bps) if cp else None,
            "declared_speed_bps": self.plan.speed_bps,
            "recorded_s": round(self.elapsed, 4), "flows": flows, "ports": self.ports,
            "link_bytes": self.link_bytes,
            "pfc": {"pauses": self.pfc1.get("pauses", 0) - self.pfc0.get("pauses", 0),
                    "paused_s": {k: round(v - paused0.get(k, 0.0), 4)
                                 for k, v in self.pfc1.get("paused_s", {}).items()
                                 if v - paused0.get(k, 0.0) > 0}},
        }


    def _per_sender(self, senders: list[tuple[str, str]]) -> list[dict[str, Any]]:
        by_host = {p["node"]: p["series"]["tx_bytes"] for p in self.ports
                   if p["port"] == "eth0" and p["tc"] == ROCE_TC}
        if not senders or any(src not in by_host for src, _ in senders):
            return []
        dsts: dict[str, set[str]] = {}
        for src, dst in senders:
            dsts.setdefault(src, set()).add(dst)
        return [{"name": f"{src} (port)", "src": src, "dst": ",".join(sorted(d)),
                 "rate_series": rates([(t, v) for t, v in by_host[src]])}
                for src, d in sorted(dsts.items())]


def port_bytes(plan: Plan) -> dict[str, float]:
    """"node:port" -> bytes sent so far, from the kernel's interface counters."""
    fams = interface.Collector.parse(interface.Collector(plan).fetch(), plan)
    sent = next(f for f in fams if f.name == "rocelab_interface_tx_bytes_total")
    return {f"{labels['node']}:{labels['port']}": v for labels, v in sent.samples}
