"""`rocelab run EXPERIMENT.yaml --out DIR`: bring the lab up if needed, start flows
and actions on a timeline, sample counters, write results.json."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import faults, forwarding, lab, state, workload
from ..congestion.model import ROCE_TC
from ..congestion.qos import queue_drops
from ..engine import client
from ..engine.job import Job, Op
from ..errors import ConvergeTimeout, RocelabError
from ..plan import Kind, Plan
from ..units import Dilation, parse_duration, parse_size, parse_speed
from . import actions, analysis
from .analysis import COUNTERS
from .sampler import Sampler, pfc_snapshot
from .spec import Experiment, Flow, load

Progress = Callable[[str], None]
SETTLE_MIN_S = 2.0  # after the last fault event, even when the run used up its duration


def _job(flow: Flow, timeout: float, dilation: Dilation) -> Job:
    kv = flow.kv.model_dump() if flow.kv else None
    rate = dilation.wall_bps(parse_speed(flow.rate)) if flow.rate else 0.0
    return Job(Op(flow.op), size=parse_size(flow.size) if flow.size else 0, kv=kv, qps=flow.qps,
               timeout_s=max(timeout, 5.0), extra={"progress_s": 0.1}, rate_bps=rate)


class FlowRun(threading.Thread):
    def __init__(self, plan: Plan, flow: Flow, t0: float, deadline: float):
        super().__init__(name=f"flow-{flow.name}", daemon=True)
        self.plan, self.flow, self.t0 = plan, flow, t0
        self.start_at = t0 + parse_duration(flow.at)
        self.job = _job(flow, deadline - self.start_at, plan.dilation)
        self.series: list[tuple[float, float]] = []
        self.results: list[dict[str, Any]] = []  # one per transfer (`repeat`)
        self.handoffs: list[tuple[float, float]] = []  # (start, duration) per transfer, wall
        self.error: str | None = None
        self.started = self.ended = 0.0
        self._base = 0  # bytes of the transfers already done (the series is cumulative)

    def pin(self) -> None:
        """With `via`: fix the QPs' UDP source ports so the data takes that spine."""
        if self.flow.via:
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
        self.started = time.monotonic()
        self.series.append((round(self.started - self.t0, 4), 0))
        src, dst = self.plan.node(self.flow.src), self.plan.node(self.flow.dst)
        try:
            for _ in range(self.flow.repeat):
                began = time.monotonic()
                self.results.append(client.transfer(self.plan, src, dst, self.job, self._tick))
                self.handoffs.append((began - self.t0, time.monotonic() - began))
                self._base += self.job.payload_bytes
        except RocelabError as e:
            self.error = str(e)
        self.ended = time.monotonic()

    @property
    def result(self) -> dict[str, Any] | None:
        """Every transfer's result folded into one (None unless all completed)."""
        if self.error or len(self.results) < self.flow.repeat:
            return None
        if len(self.results) == 1:
            return self.results[0]
        return {"integrity_ok": all(r.get("integrity_ok") for r in self.results),
                "qps": [q for r in self.results for q in r.get("qps", [])],
                **{k: sum(r.get(k, 0) for r in self.results) for k in COUNTERS}}

    def record(self, t0: float) -> analysis.FlowRecord:
        """What this flow did, relative to the run's start `t0`, as plain data."""
        done = self.result is not None
        return analysis.FlowRecord(
            name=self.flow.name, src=self.flow.src, dst=self.flow.dst, op=self.flow.op,
            bytes=self.job.payload_bytes * self.flow.repeat, repeat=self.flow.repeat,
            start_s=self.started - t0, end_s=self.ended - t0 if done else None,
            series=list(self.series), handoffs=list(self.handoffs), result=self.result,
            error=self.error)

    def _tick(self, done: int, _total: int, sent: int | None = None) -> None:
        self.series.append((round(time.monotonic() - self.t0, 4),
                            self._base + (sent if sent is not None else done)))


def run(path: str | Path, keep: bool = False, name: str | None = None,
        progress: Progress = lambda m: None) -> tuple[analysis.Results, Plan]:
    """Run an experiment file; return its results (results.json's content) and the lab's plan.

    Brings the lab up first unless it is running (and down again after, unless `keep`).
    Writes nothing: `report.save(out, results, plan)` does, as for `transfer` and `kv`.
    """
    exp, topology = load(path)
    static_plan = lab.load_topology(topology)[1]
    check(exp, static_plan)  # before anything exists: a bad experiment creates nothing
    name = name or exp.lab or static_plan.lab
    brought_up = name not in state.known_labs()
    if brought_up:
        progress(f"bringing up lab {name} from {topology}")
        lab.up(topology, name=name, progress=progress)
    try:
        plan = state.lab_plan(name)
        if not brought_up:  # a running lab may have been brought up from another topology
            check(exp, plan)
        results = _execute(exp, plan, progress)
    finally:
        if brought_up and not keep:
            lab.down(name)
    return results, plan


def check(exp: Experiment, plan: Plan) -> None:
    """Flows name hosts (and spines) of this plan; congestion actions need a congestion plane."""
    spines = [n.name for n in plan.of_kind(Kind.SPINE)]
    for f in exp.flows:
        workload.host(plan, f.src, option=f"flows.{f.name}.src")
        workload.host(plan, f.dst, option=f"flows.{f.name}.dst")
        if f.via is not None and f.via not in spines:
            raise RocelabError(f"flows.{f.name}.via: no spine {f.via!r}; spines: {', '.join(spines)}")
    switches = {n.name for n in plan.routers}
    for i, a in enumerate(exp.actions):
        args = getattr(a, a.kind)
        if a.kind == "ecn" and args["node"] not in switches:
            raise RocelabError(f"actions.{i}.ecn.node: no switch {args['node']!r}; "
                               f"switches: {', '.join(sorted(switches))}")
        if a.kind in ("drain", "dcqcn"):
            workload.host(plan, args["host"], option=f"actions.{i}.{a.kind}.host")
    needs_cc = [a.kind for a in exp.actions if a.kind in ("ecn", "drain", "dcqcn")]
    if needs_cc and plan.congestion is None:
        raise RocelabError(f"experiment {exp.name}: actions {', '.join(needs_cc)} need a topology "
                           "with `congestion: enabled: true`")


def _execute(exp: Experiment, plan: Plan, progress: Progress) -> dict[str, Any]:
    hosts = sorted({plan.node(h) for f in exp.flows for h in (f.src, f.dst)}
                   | {plan.node(a.dcqcn["host"]) for a in exp.actions if a.kind == "dcqcn"},
                   key=lambda n: n.name)
    client.ensure_engines(plan, hosts)
    t0 = time.monotonic() + 0.2
    deadline = t0 + parse_duration(exp.duration)
    sampler = Sampler(plan, parse_duration(exp.sample_every), t0) if plan.congestion else None
    pfc0 = pfc_snapshot(plan)
    flows = [FlowRun(plan, f, t0, deadline) for f in exp.flows]
    for f in flows:
        f.pin()
    timeline = actions.Timeline(plan, exp.actions, t0)
    with contextlib.ExitStack() as stack:
        watcher = stack.enter_context(faults.FibWatcher(plan)) if any(
            a.kind == "fault" for a in exp.actions) else None
        if sampler:
            sampler.start()
        timeline.start()
        stack.callback(timeline.restore)
        for f in flows:
            f.start()
        progress(f"running {len(flows)} flows, {len(exp.actions)} actions (at most {exp.duration})")
        for f in flows:
            f.join(max(0.0, deadline + 30 - time.monotonic()))
        timeline.finish(deadline)
        if watcher:  # until routing reflects the last fault event, then time each one
            _settle_last(plan, watcher, timeline.events, deadline, progress)
            _add_convergence(plan, timeline.events, watcher.samples)
    ports = sampler.stop() if sampler else []
    return analysis.summarize(exp, plan, [f.record(t0) for f in flows], ports, timeline.events,
                              pfc0, pfc_snapshot(plan),
                              lossless_drops(plan) if plan.congestion else None)


def _fault_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fail and heal events that routing must reflect (a flap's are its transitions)."""
    out = []
    for e in events:
        if e.get("kind") == "fault":
            out += [t for t in e.get("transitions", [e]) if "monotonic" in t and "after" in t]
    return out


def _settle_last(plan: Plan, watcher: faults.FibWatcher, events: list[dict[str, Any]],
                 deadline: float, progress: Progress) -> None:
    """Wait (within the experiment's duration, at least SETTLE_MIN_S) until routing reflects
    the last fault event; a fabric that does not is reported by its convergence (settled: false)."""
    done = _fault_events(events)
    if not done:
        return
    try:
        faults.settle(plan, watcher, done[-1], max(SETTLE_MIN_S, deadline - time.monotonic()),
                      progress)
    except ConvergeTimeout:
        pass  # convergence() of that event says settled: false


def _add_convergence(plan: Plan, events: list[dict[str, Any]], samples: list) -> None:
    """Time each fault event's convergence, up to the next fault event."""
    timed = [e for e in events if e.get("kind") == "fault" and "monotonic" in e and "after" in e]
    for ev, nxt in zip(timed, timed[1:] + [None]):
        until = nxt["monotonic"] if nxt else None
        ev["convergence"] = faults.convergence(samples, ev, plan, until=until)


def lossless_drops(plan: Plan) -> int:
    """Drops in every port's lossless (TBF) queue: must stay 0 with enough headroom."""
    return sum(queue_drops(plan, ROCE_TC).values())
