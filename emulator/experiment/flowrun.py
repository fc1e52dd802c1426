"""One flow of a run: the engine `Job` it asks for, and the thread that runs its
transfers on the timeline and records their progress (`FlowRun.record`: the
`analysis.FlowRecord` the run's results are computed from).

Progress comes every 0.1 s while a transfer's data moves (the engine's `progress`
events): `series` is the bytes put on the wire, `delivered` the bytes of completed
messages; a transfer's end is recorded when its call returns.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

from .. import forwarding
from ..engine import client
from ..engine.job import Job, Op
from ..errors import RocelabError
from ..plan import Plan
from ..units import Dilation, parse_duration, parse_size, parse_speed
from . import actions, analysis, multipath
from .analysis import COUNTERS
from .spec import Flow


def job_of(flow: Flow, timeout: float, dilation: Dilation) -> Job:
    kv = flow.kv.model_dump() if flow.kv else None
    rate = dilation.wall_bps(parse_speed(flow.rate)) if flow.rate else 0.0
    return Job(Op(flow.op), size=parse_size(flow.size) if flow.size else 0, kv=kv, qps=flow.qps,
               timeout_s=max(timeout, 5.0), extra={"progress_s": 0.1, "flow": flow.name},
               rate_bps=rate,
               ack_timeout_s=parse_duration(flow.ack_timeout) if flow.ack_timeout is not None
               else 0.0, **transport_args(flow))


def transport_args(flow: Flow) -> dict[str, Any]:
    """The Job's transport fields for an MRC flow ({} for RC: the Job's default); an engine
    built without MRC is a clear error naming the flow, before anything runs."""
    if (flow.transport or "rc") == "rc":
        return {}
    if "transport" not in {f.name for f in dataclasses.fields(Job)}:
        raise RocelabError(f"flows.{flow.name}.transport: mrc needs the engine's MRC "
                           "transport, which this build of rocelab lacks")
    return {"transport": "mrc", **({"evs": flow.evs} if flow.evs is not None else {})}


class FlowRun(threading.Thread):
    def __init__(self, plan: Plan, flow: Flow, t0: float, deadline: float):
        super().__init__(name=f"flow-{flow.name}", daemon=True)
        self.plan, self.flow, self.t0 = plan, flow, t0
        self.start_at = t0 + parse_duration(flow.at)
        self.deadline = deadline
        # another flow's bytes on the wire so far, by name (`once_sent`); set by the run
        self.sent_by: Callable[[str], int] | None = None
        self.job = job_of(flow, deadline - self.start_at, plan.dilation)
        self.series: list[tuple[float, float]] = []
        self.results: list[dict[str, Any]] = []  # one per transfer (`repeat`)
        self.handoffs: list[tuple[float, float]] = []  # (start, duration) per transfer, wall
        self.delivered: list[tuple[float, float]] = []  # (t, bytes completed), cumulative
        self.data_phases: list[tuple[float, float]] = []  # per transfer: data start .. end, wall
        self.error: str | None = None
        self.started = self.ended = 0.0
        self._spines: list[Future[None]] = []  # each transfer's spines, resolved beside the next
        self._base = 0  # bytes of the transfers already done (the series is cumulative)

    def pin(self) -> None:
        """With `via`: fix the QPs' UDP source ports so the data takes that spine (RC: an
        MRC connection sprays over its EVs, so `via` leaves it as it is)."""
        if self.flow.via and (self.flow.transport or "rc") == "rc":
            src, dst = self.plan.node(self.flow.src), self.plan.node(self.flow.dst)
            data_src, data_dst = (src, dst) if self.job.op is Op.WRITE else (dst, src)
            try:
                sports = forwarding.sports_via(self.plan, data_src, data_dst, self.flow.via,
                                              self.job.qps)
            except RocelabError as e:
                raise RocelabError(f"flows.{self.flow.name}.{e}") from None
            self.job = dataclasses.replace(self.job, udp_sports=sports)

    def run(self) -> None:
        time.sleep(max(0.0, self.start_at - time.monotonic()))  # the timeline, not a sync
        if self.flow.once_sent is not None and self.sent_by is not None:
            actions.await_sent(self.sent_by, self.flow.once_sent, self.deadline, threading.Event())
        self.started = time.monotonic()
        self.series.append((round(self.started - self.t0, 4), 0))
        src, dst = self.plan.node(self.flow.src), self.plan.node(self.flow.dst)
        began = self.started
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"spines-{self.flow.name}")
        try:
            for _ in range(self.flow.repeat):
                began = time.monotonic()
                res = client.transfer(self.plan, src, dst, self.job, self._tick, resolve=False)
                end = time.monotonic()
                self._spines.append(pool.submit(client.resolve_spines, self.plan, src, dst, res))
                self.results.append(cast(dict[str, Any], res))  # kept as the JSON it is
                self.handoffs.append((began - self.t0, end - began))
                self._base += self.job.payload_bytes
                self.delivered.append((round(end - self.t0, 4), self._base))
                data = max(began, end - float(res.get("duration_s", end - began)))
                self.data_phases.append((round(data - self.t0, 4), round(end - self.t0, 4)))
        except RocelabError as e:
            self.error = str(e)
            self.data_phases.append((round(began - self.t0, 4),
                                     round(time.monotonic() - self.t0, 4)))
        self.ended = time.monotonic()
        pool.shutdown()
        self._resolved()

    def _resolved(self) -> None:
        """Wait for the transfers' spines; one that could not be resolved fails the flow
        as it did when it was resolved inside the transfer."""
        for fut in self._spines:
            try:
                fut.result()
            except RocelabError as e:
                self.error = self.error or str(e)

    @property
    def result(self) -> dict[str, Any] | None:
        """Every transfer's result folded into one (None unless all completed)."""
        if self.error or len(self.results) < self.flow.repeat:
            return None
        if len(self.results) == 1:
            return self.results[0]
        return {"integrity_ok": all(r.get("integrity_ok") for r in self.results),
                "qps": [q for r in self.results for q in r.get("qps", [])],
                "interruption_s": max(r.get("interruption_s", 0.0) for r in self.results),
                **{k: sum(r.get(k, 0) for r in self.results) for k in COUNTERS},
                **multipath.fold_transport(self.results)}

    def record(self, t0: float) -> analysis.FlowRecord:
        """What this flow did, relative to the run's start `t0`, as plain data."""
        done = self.result is not None
        return analysis.FlowRecord(
            name=self.flow.name, src=self.flow.src, dst=self.flow.dst, op=self.flow.op,
            bytes=self.job.payload_bytes * self.flow.repeat, repeat=self.flow.repeat,
            start_s=self.started - t0, end_s=self.ended - t0 if done else None,
            series=list(self.series), handoffs=list(self.handoffs), result=self.result,
            error=self.error, via=self.flow.via, transport=self.flow.transport or "rc",
            unloaded=self.flow.unloaded, mtu=self.job.mtu, may_fail=self.flow.may_fail,
            qp_bytes=multipath.qp_bytes([s.length for s in self.job.segments()], self.job.qps),
            delivered=[(round(self.started - t0, 4), 0)] + self.delivered,
            data_phases=list(self.data_phases))

    def sent(self) -> int:
        """Bytes on the wire so far (progress every 0.1 s; a finished transfer whole)."""
        return int(max(self._base, self.series[-1][1] if self.series else 0))

    def _tick(self, done: int, _total: int, sent: int | None = None) -> None:
        t = round(time.monotonic() - self.t0, 4)
        self.series.append((t, self._base + (sent if sent is not None else done)))
        self.delivered.append((t, self._base + done))
