"""`rocelab run EXPERIMENT.yaml --out DIR`: bring the lab up if needed, start flows
and actions on a timeline, sample counters, write results.json.

An experiment with `fabrics:` runs the same flows and actions on each fabric in turn
(`run_compare`); `compare.summarize` puts the fabrics' results side by side. Callers can
add their own numbers to each run's results with `measures` (see `Measure`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from .. import faults, forwarding, lab, state, workload
from ..congestion.qos import queue_drops
from ..engine import client
from ..engine.job import Job, Op
from ..errors import ConvergeTimeout, RocelabError, SpecError
from ..metrics.snapshot import Snapshots, results_block
from ..plan import Kind, Node, Plan
from ..plan.congestion import ROCE_TC
from ..spec import LAB_NAME, LAB_RULE, MAX_LAB_NAME, located, read_yaml
from ..units import Dilation, parse_duration, parse_size, parse_speed
from . import actions, analysis, compare, multipath, replaying
from .analysis import COUNTERS
from .counters import PortCounters
from .sampler import Sampler, pfc_snapshot
from .spec import Experiment, Flow, load, load_fabrics

Progress = Callable[[str], None]
SETTLE_MIN_S = 2.0  # after the last fault event, even when the run used up its duration


@dataclasses.dataclass
class FabricRun:
    """One run on one lab, as a `Measure` sees it (the lab is up while it is called)."""

    label: str  # the fabric's label ("" for a one-topology experiment)
    lab: str
    plan: Plan
    t0: float  # time.monotonic() of the run's zero: results' times (t_s, start_s) count from it
    events: list[dict[str, Any]]  # the timeline's events so far (faults with their times)
    progress: Progress


Finish = Callable[[], dict[str, Any]]
# Called with the lab up, after the engines are ready and just before the first flow's
# zero; returns a Finish (or None), called once the run is over (flows done, the last
# fault settled), the lab still up: its dict goes into the results' `measured` (and, for
# a compare run, its scalar values into the `compare` rows as measured.KEY).
Measure = Callable[[FabricRun], Finish | None]


def at_end(fn: Callable[[FabricRun], dict[str, Any]]) -> Measure:
    """A Measure that only reads something once the run is over."""
    return lambda run: (lambda: fn(run))


def _job(flow: Flow, timeout: float, dilation: Dilation) -> Job:
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
        self.job = _job(flow, deadline - self.start_at, plan.dilation)
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


def run(path: str | Path, keep: bool = False, name: str | None = None,
        progress: Progress = lambda m: None, measures: Sequence[Measure] = ()
        ) -> tuple[analysis.Results, Plan]:
    """Run an experiment file; return its results (results.json's content) and the lab's plan.

    Brings the lab up first unless it is running (and down again after, unless `keep`).
    Writes nothing: `report.save(out, results, plan)` does, as for `transfer` and `kv`.
    """
    exp, topology = load(path)
    static_plan = lab.load_topology(topology)[1]
    check(exp, static_plan)  # before anything exists: a bad experiment creates nothing
    return run_fabric(exp, topology, name or exp.lab or static_plan.lab, keep=keep,
                      progress=progress, measures=measures)


def run_fabric(exp: Experiment, topology: Path, name: str, keep: bool = False,
               progress: Progress = lambda m: None, measures: Sequence[Measure] = (),
               label: str = "") -> tuple[analysis.Results, Plan]:
    """Run `exp` on lab `name` (brought up from `topology` unless it is running, and down
    again after unless `keep`); `exp` was checked against the topology's plan."""
    brought_up = name not in state.known_labs()
    if brought_up:
        progress(f"bringing up lab {name} from {topology}")
        lab.up(topology, name=name, progress=progress)
    try:
        plan = state.lab_plan(name)
        if not brought_up:  # a running lab may have been brought up from another topology
            check(exp, plan)
        if exp.replay is not None:  # the trace, beside the flows and under the same actions
            measures = [*measures, replaying.measure(exp.replay)]
        results = _execute(exp, plan, progress, measures, label)
    finally:
        if brought_up and not keep:
            lab.down(name)
    return results, plan


@dataclasses.dataclass(frozen=True)
class Fabric:
    """One fabric of a compare experiment: its label, topology file, lab and (static) plan."""

    label: str
    topology: Path
    lab: str
    plan: Plan
    running: bool  # the lab was up already: it is used as it is and left up


def fabrics(path: str | Path, name: str | None = None, live: bool = True
            ) -> tuple[Experiment, list[Fabric]]:
    """A compare experiment's fabrics, each checked: its topology compiles under its lab
    name, and the flows and actions name hosts, spines and switches it has. Nothing is
    created; `live`: a lab that is already running is checked as it runs.

    Each fabric's lab is PREFIX-LABEL, PREFIX from `name` (--name) or the file's `lab:`;
    without either, the fabric's topology's own name.
    """
    exp, topologies = load_fabrics(path)
    if exp.fabrics is None:
        raise SpecError(str(path), "fabrics", "not a compare experiment (it has `topology:`)")
    prefix = name or exp.lab
    running = state.known_labs() if live else set()
    node = read_yaml(path)[1]
    out: list[Fabric] = []
    for label, topology in topologies.items():
        wanted = f"{prefix}-{label}" if prefix else None
        if wanted is not None and (len(wanted) > MAX_LAB_NAME or not re.fullmatch(LAB_NAME, wanted)):
            where = (str(path), "lab") if not name else ("--name", repr(name))  # one line
            raise located(SpecError(where[0], where[1], f"lab {wanted!r} of fabric {label} is not a "
                                    f"lab name: must be {LAB_RULE}"), node if not name
                          else None)
        plan = lab.load_topology(topology, wanted)[1]
        clash = next((f.label for f in out if f.lab == plan.lab), None)
        if clash:
            raise located(SpecError(str(path), f"fabrics.{label}", f"fabrics {clash} and {label} "
                                    f"would share lab {plan.lab}: give the run a prefix (lab: or "
                                    "--name)"), node)
        live_plan = state.lab_plan(plan.lab) if plan.lab in running else plan
        try:
            check(exp.on_fabric(label), live_plan)
        except RocelabError as e:
            raise on_fabric(e, label) from None
        out.append(Fabric(label, topology, plan.lab, live_plan, plan.lab in running))
    return exp, out


def on_fabric(e: RocelabError, label: str) -> RocelabError:
    """The same error (type, exit code) saying which fabric it happened on."""
    if not isinstance(e, SpecError) and getattr(e, "fabric", None) is None:
        e.fabric = label  # type: ignore[attr-defined]
        e.args = (f"fabric {label}: {e}",)
    return e


def run_compare(path: str | Path, keep: bool = False, name: str | None = None,
                progress: Progress = lambda m: None, measures: Sequence[Measure] = ()
                ) -> tuple[compare.CompareResults, dict[str, Plan]]:
    """Run a `fabrics:` experiment: the same flows and actions on each fabric in turn
    (up, run, down, in the file's order), so each runs alone on the machine. Every
    fabric is checked before the first lab is created. `keep` keeps the last fabric's
    lab up (the others are down before the next comes up); labs that were running are
    used and left up. Returns results.json's content and each fabric's plan."""
    exp, fabs = fabrics(path, name)
    own = exp.model_copy(update={"expect": compare.per_fabric(exp.expect)})
    results: dict[str, analysis.Results] = {}
    plans: dict[str, Plan] = {}
    for i, fab in enumerate(fabs):
        progress(f"fabric {fab.label} ({i + 1}/{len(fabs)}): lab {fab.lab} from {fab.topology.name}"
                 + (" (running)" if fab.running else ""))
        try:
            results[fab.label], plans[fab.label] = run_fabric(
                own.on_fabric(fab.label), fab.topology, fab.lab, keep=keep and i == len(fabs) - 1,
                progress=_tagged(progress, fab.label),
                measures=measures, label=fab.label)
        except RocelabError as e:
            raise on_fabric(e, fab.label) from None
    return compare.summarize(exp, results, {f.label: str(f.topology) for f in fabs}), plans


def _tagged(progress: Progress, label: str) -> Progress:
    return lambda m: progress(f"[{label}] {m}")


def check(exp: Experiment, plan: Plan) -> None:
    """Flows name hosts (and spines) of this plan; actions name its switches and hosts
    (faults: nodes and links it has); congestion actions need a congestion plane."""
    spines = [n.name for n in plan.of_kind(Kind.SPINE)]
    for f in exp.flows:
        workload.host(plan, f.src, option=f"flows.{f.name}.src")
        workload.host(plan, f.dst, option=f"flows.{f.name}.dst")
        if f.via is not None and f.via not in spines:
            raise RocelabError(f"flows.{f.name}.via: no spine {f.via!r}; spines: {', '.join(spines)}")
        try:  # the job the flow will run: its own limits, and done before the run ends
            left = parse_duration(exp.duration) - parse_duration(f.at)
            workload.check_duration(plan, _job(f, left, plan.dilation), plan.node(f.src),
                                    bound="the experiment's duration after its start")
        except RocelabError as e:
            raise RocelabError(f"flows.{f.name}: {str(e).lstrip('-')}") from None
    switches = {n.name for n in plan.routers}
    for i, a in enumerate(exp.actions):
        args = a.args
        if a.kind == "ecn" and args["node"] not in switches:
            raise RocelabError(f"actions.{i}.ecn.node: no switch {args['node']!r}; "
                               f"switches: {', '.join(sorted(switches))}")
        if a.kind in ("drain", "dcqcn", "broadcast", "churn"):
            workload.host(plan, args["host"], option=f"actions.{i}.{a.kind}.host")
        if a.kind == "stp" and not a.args["enabled"] and plan.fabric.value == "l2" \
                and plan.congestion is None and len(spines) > 1:
            raise RocelabError(f"actions.{i}.stp: STP off on {plan.lab} makes a loop on unshaped "
                               "links, a storm as fast as the CPUs go: use a topology with "
                               "`congestion: enabled: true` (every port shaped)")
        if a.kind == "fault":
            _fault_target(plan, args, f"actions.{i}.fault")
        if a.kind == "vtysh" and args["node"] not in {n.name for n in plan.frr_nodes}:
            routers = ", ".join(n.name for n in plan.frr_nodes) or "none: fabric l2 runs no FRR"
            raise RocelabError(f"actions.{i}.vtysh.node: no router running FRR named "
                               f"{args['node']!r}; routers: {routers}")
    _needs(exp, plan)


def _needs(exp: Experiment, plan: Plan) -> None:
    """Congestion actions need a congestion plane; a replay its trace, pools and shaping."""
    needs_cc = [a.kind for a in exp.actions if a.kind in ("ecn", "drain", "dcqcn")]
    if needs_cc and plan.congestion is None:
        raise RocelabError(f"experiment {exp.name}: actions {', '.join(needs_cc)} need a topology "
                           "with `congestion: enabled: true`")
    if exp.replay is not None:
        replaying.check(exp.replay, plan)


def _fault_target(plan: Plan, args: dict[str, Any], field: str) -> None:
    """A fault action parses as it will when it runs: its verb, its keys, a node or link this
    plan has (the fault model's own checks)."""
    try:
        faults.parse_action(plan, dict(args))
    except faults.FaultError as e:
        e.args = (f"{field}: {e}",)
        raise


def _engines(plan: Plan, exp: Experiment, hosts: list[Node]) -> None:
    """Start the hosts' engines; every flow's source engine then makes the flow's test
    data before the run is timed (in parallel), so no handoff includes generating it
    (client.prepare)."""
    client.ensure_engines(plan, hosts)
    jobs = [(plan.node(f.src), _job(f, parse_duration(exp.duration), plan.dilation))
            for f in exp.flows]
    with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
        list(pool.map(lambda hj: client.prepare(plan, *hj), jobs))


def _execute(exp: Experiment, plan: Plan, progress: Progress, measures: Sequence[Measure] = (),
             label: str = "") -> analysis.Results:
    hosts = sorted({plan.node(h) for f in exp.flows for h in (f.src, f.dst)}
                   | {plan.node(a.dcqcn["host"]) for a in exp.actions if a.dcqcn is not None},
                   key=lambda n: n.name)
    _engines(plan, exp, hosts)
    snaps = Snapshots(plan)  # diagnose's evidence: the collectors' counters around the run
    scrape0 = snaps.take()
    counters = PortCounters(plan, parse_duration(exp.sample_every))  # every port read: not timed
    t0 = counters.t0 = time.monotonic() + 0.2
    deadline = t0 + parse_duration(exp.duration)
    sampler = Sampler(plan, parse_duration(exp.sample_every), t0) if plan.congestion else None
    pfc0 = pfc_snapshot(plan)
    flows = _flow_runs(exp, plan, t0, deadline)
    timeline = actions.Timeline(plan, exp.actions, t0, deadline, sent=_by_name(flows))
    with contextlib.ExitStack() as stack:
        stack.callback(snaps.close)
        stack.callback(counters.stop)  # idempotent: the sockets are closed on any error too
        ctx = FabricRun(label, plan.lab, plan, t0, timeline.events, progress)
        finishers = [f for f in (m(ctx) for m in measures) if f is not None]
        watcher = stack.enter_context(faults.FibWatcher(plan)) if any(
            a.kind == "fault" for a in exp.actions) else None
        counters.start()
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
        recorded = counters.stop()
        evidence = results_block(plan, scrape0, snaps.take(), time.monotonic() - t0)
        evidence["roce_mtu"] = max(f.job.mtu for f in flows) if flows else 4096
        measured: dict[str, Any] = {}
        for finish in finishers:
            measured.update(finish())
    ports = sampler.stop() if sampler else []
    return analysis.summarize(exp, plan, analysis.Recordings(
        [f.record(t0) for f in flows], ports, timeline.events, pfc0, pfc_snapshot(plan),
        lossless_drops(plan) if plan.congestion else None,
        counters=recorded, measured=measured, evidence=evidence,
        trimming=sampler.trims if sampler else None))


def _flow_runs(exp: Experiment, plan: Plan, t0: float, deadline: float) -> list[FlowRun]:
    """Every flow's thread, pinned to its spine (`via`) and able to see the others'
    progress (`once_sent`)."""
    flows = [FlowRun(plan, f, t0, deadline) for f in exp.flows]
    for f in flows:
        f.pin()
        f.sent_by = _by_name(flows)
    return flows


def _by_name(flows: list[FlowRun]) -> Callable[[str], int]:
    """A flow's bytes on the wire so far, by name: what a `once_sent` waits on."""
    return lambda name: next(f for f in flows if f.flow.name == name).sent()


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
