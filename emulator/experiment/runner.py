"""`rocelab run EXPERIMENT.yaml --out DIR`: bring the lab up if needed, start flows
and actions on a timeline, sample counters, write results.json.

An experiment with `fabrics:` runs the same flows and actions on each fabric in turn
(`run_compare`); `compare.summarize` puts the fabrics' results side by side. Callers can
add their own numbers to each run's results with `measures` (see `Measure`).

Each flow runs as a `flowrun.FlowRun`; `checks.check` (also `runner.check`) holds an
experiment against a plan before anything exists.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .. import faults, lab, state
from ..congestion.qos import queue_drops
from ..engine import client
from ..errors import ConvergeTimeout, RocelabError, SpecError
from ..metrics.snapshot import Snapshots, results_block
from ..plan import Node, Plan
from ..plan.congestion import ROCE_TC
from ..spec import LAB_NAME, LAB_RULE, MAX_LAB_NAME, located, read_yaml
from ..units import parse_duration
from . import actions, analysis, compare, replaying
from .checks import check
from .counters import PortCounters
from .flowrun import FlowRun, job_of
from .sampler import Sampler, pfc_snapshot
from .spec import Experiment, load, load_fabrics

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


def _engines(plan: Plan, exp: Experiment, hosts: list[Node]) -> None:
    """Start the hosts' engines; every flow's source engine then makes the flow's test
    data before the run is timed (in parallel), so no handoff includes generating it
    (client.prepare)."""
    client.ensure_engines(plan, hosts)
    jobs = [(plan.node(f.src), job_of(f, parse_duration(exp.duration), plan.dilation))
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
