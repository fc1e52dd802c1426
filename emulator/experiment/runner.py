"""`rocelab run EXPERIMENT.yaml --out DIR`: bring the lab up if needed, start flows
and actions on a timeline, sample counters, write results.json."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import faults, forwarding, lab, state, workload
from ..congestion.model import ROCE_TC
from ..engine import client
from ..engine.job import Job, Op
from ..errors import ConvergeTimeout, RocelabError
from ..plan import Kind, Plan
from ..units import Dilation, parse_duration, parse_size, parse_speed
from . import actions, analysis
from .sampler import Sampler, pfc_snapshot
from . import report
from .spec import Experiment, Flow, load

Progress = Callable[[str], None]
SETTLE_MIN_S = 2.0  # after the last fault event, even when the run used up its duration
COUNTERS = ("retransmitted_packets", "timeouts", "naks_rx", "cnps_rx", "cnps_tx")  # per flow


def _job(flow: Flow, timeout: float, dilation: Dilation) -> Job:
    kv = flow.kv.model_dump() if flow.kv else None
    rate = dilation.wall_rate(parse_speed(flow.rate)) if flow.rate else 0.0
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

    def _tick(self, done: int, _total: int, sent: int | None = None) -> None:
        self.series.append((round(time.monotonic() - self.t0, 4),
                            self._base + (sent if sent is not None else done)))


def run(path: str | Path, out: Path, keep: bool = False, name: str | None = None,
        progress: Progress = lambda m: None) -> dict[str, Any]:
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
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    report.write(out, results, plan)  # report.md, report.html, plots, topology picture
    return results


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
    return summarize(exp, plan, t0, flows, ports, timeline.events, pfc0, pfc_snapshot(plan))


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


def summarize(exp: Experiment, plan: Plan, t0: float, flows: list[FlowRun], ports: list[dict],
              events: list[dict], pfc0: dict, pfc1: dict) -> dict[str, Any]:
    cp = plan.congestion
    dilation = plan.dilation
    flow_out = [_flow_summary(f, t0, dilation) for f in flows]
    starts = [f["start_s"] for f in flow_out]
    ends = [f["end_s"] for f in flow_out if f["end_s"] is not None]
    steady0 = min(starts) + parse_duration(exp.steady_after)
    steady1 = min(ends) if ends else steady0
    series = {f.flow.name: f.series for f in flows}
    steady_rates = {n: analysis.mean_rate(s, steady0, steady1) for n, s in series.items()}
    if steady1 <= steady0:  # a flow ended before steady_after: no common steady state
        steady_rates = {}
    reactions = sorted(pfc1.get("reaction_us", [])[len(pfc0.get("reaction_us", [])):])
    return {
        "experiment": exp.name, "lab": plan.lab, "dilation": dilation,
        "link_rate_bps": cp.rate_bps if cp else None, "declared_speed_bps": plan.speed_bps,
        "flows": flow_out, "ports": ports, "events": events,
        "steady": {"from_s": steady0, "to_s": steady1,
                   "rates_bps": steady_rates,
                   "jain": analysis.jain(list(steady_rates.values())) if steady_rates else None,
                   "bottleneck": analysis.bottleneck(ports, steady0, steady1, cp.rate_bps, ROCE_TC)
                   if cp else None},
        "pfc": {"pauses": pfc1.get("pauses", 0) - pfc0.get("pauses", 0),
                "reaction_us_p50": analysis_pct(reactions, 50),
                "reaction_us_p99": analysis_pct(reactions, 99),
                "paused_s": {k: round(v - pfc0.get("paused_s", {}).get(k, 0.0), 4)
                             for k, v in pfc1.get("paused_s", {}).items()
                             if v - pfc0.get("paused_s", {}).get(k, 0.0) > 0}},
        "phases": {name: phase(members, flow_out, series, ports)
                   for name, members in exp.phases.items()},
        "lossless_drops": lossless_drops(plan) if cp else None,
        "integrity_ok": all(f["integrity_ok"] for f in flow_out),
    }


def phase(members: list[str], flows: list[dict[str, Any]], series: dict[str, list],
          ports: list[dict]) -> dict[str, Any]:
    """A window from the first start to the last end of `members`: every flow's mean rate
    while it ran inside the window, and the pause frames sent in it."""
    last = max((s[-1][0] for s in series.values() if s), default=0.0)
    span = {f["name"]: (f["start_s"], f["end_s"] if f["end_s"] is not None else last)
            for f in flows}
    t0 = min(span[m][0] for m in members)
    t1 = max(span[m][1] for m in members)
    rates = {}
    for name, (a, b) in span.items():
        a, b = max(a, t0), min(b, t1)
        if b > a:
            rates[name] = analysis.mean_rate(series[name], a, b)
    handoffs = {}  # repeated flows: their transfers that started in the window
    for f in flows:
        durations = sorted(d for a, d in f.get("handoffs", []) if t0 <= a <= t1)
        if durations:
            handoffs[f["name"]] = {"count": len(durations), "p50_s": workload.percentile(durations, 50),
                                   "p99_s": workload.percentile(durations, 99), "max_s": durations[-1]}
    pauses = sum(analysis.bytes_between(p["series"].get("pause_tx", []), t0, t1) for p in ports)
    return {"from_s": t0, "to_s": t1, "rates_bps": rates, "handoffs": handoffs,
            "pauses": round(pauses)}


def analysis_pct(values: list[float], q: float) -> float | None:
    return round(workload.percentile(values, q), 1) if values else None


def _flow_summary(f: FlowRun, t0: float, dilation: Dilation) -> dict[str, Any]:
    r = f.result or {}
    fct = (f.ended - f.started) if f.result else None
    return {
        "name": f.flow.name, "src": f.flow.src, "dst": f.flow.dst, "op": f.flow.op,
        "bytes": f.job.payload_bytes * f.flow.repeat, "start_s": round(f.started - t0, 4),
        "end_s": round(f.ended - t0, 4) if f.result else None,
        "fct_s": fct, "fct_real_s": dilation.real(fct) if fct else None,
        "goodput_bps": f.job.payload_bytes * f.flow.repeat * 8 / fct if fct else None,
        "integrity_ok": bool(r.get("integrity_ok")), "error": f.error,
        **{k: r.get(k, 0) for k in COUNTERS},
        "spines": sorted({q.get("spine") for q in r.get("qps", []) if q.get("spine")}),
        "rate_series": analysis.rates(f.series),
        **({"handoffs": [[round(a, 4), round(d, 4)] for a, d in f.handoffs]}
           if f.flow.repeat > 1 else {}),
    }


def lossless_drops(plan: Plan) -> int:
    """Drops in every port's lossless (TBF) queue: must stay 0 with enough headroom."""
    from ..congestion.qos import queue_drops
    return sum(queue_drops(plan, ROCE_TC).values())
