"""Lab lifecycle: `up` as a transaction, `down` from kernel state.

up:   preflight: topology file -> spec -> plan -> rendered configs, and what the
      machine must allow (root, FRR's parser, names free, memory): nothing touched;
      the neighbour budget (checked, or raised: the first undo); build, the
      transaction: run dir -> realize -> controller -> FRR daemons -> converged ->
      rxe guests -> exporter listening. Every created resource registers its undo
      at once; any failure (or Ctrl-C, or SIGTERM) unwinds everything before the
      error is reported.
down: find the lab's processes and namespaces from the kernel, stop them,
      remove the run dir. Idempotent; needs no state file.

`up --metrics ADDR:PORT` also starts the lab's Prometheus exporter
(metrics/launch.py); `down` stops it first.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import converge, estimate, frr, neighbours, netns, procs, rundirs, state, validate_block
from .congestion.launch import start_controller
from .errors import LabExistsError, NotRootError, SpecError
from .hosts import boot as boot_hosts
from .metrics import launch as metrics_launch
from .names import check_lab
from .paths import lab_run_dir, own_run_dir
from .plan import Plan, compile_plan
from .progress import steps
from .realize import realize
from .render import Rendered, render
from .spec import Topology, load, located, parse, read_yaml

Progress = Callable[[str], None]
DEFAULT_TIMEOUT_S = 60.0


def _quiet(_: str) -> None:
    pass


@dataclass
class UpResult:
    plan: Plan
    timings: dict[str, float]
    daemons: list[frr.Daemon] = field(default_factory=list)


def require_root() -> None:
    if os.geteuid() != 0:
        raise NotRootError("this command needs root (network namespaces, FRR): run it with sudo")


def load_topology(source: str | Path | Mapping[str, Any], name: str | None = None,
                  templates: str | Path | None = None) -> tuple[Topology, Plan, Rendered]:
    """The pure half of `up` (also `render`): validate, plan, render. Touches nothing.

    `source` is a topology file, or the same content as a dict (tests that build
    topologies in code); errors then name `<dict>` instead of a file and line.
    `templates`: a directory of FRR templates that replace ours (render.render).
    """
    topo, plan = plan_topology(source, name)
    return topo, plan, render(plan, templates)


def plan_topology(source: str | Path | Mapping[str, Any],
                  name: str | None = None) -> tuple[Topology, Plan]:
    """load_topology's first two phases, validate and plan, without rendering a config:
    what a question about the plan alone needs (rendering 800 routers takes seconds)."""
    from_file = not isinstance(source, Mapping)
    where = str(source) if from_file else "<dict>"
    topo = load(source) if from_file else parse(dict(source), where)  # type: ignore[arg-type]
    if name is not None:
        topo = parse(topo.model_dump(mode="json") | {"name": name}, f"--name {name!r}")
    try:
        plan = compile_plan(topo, where)
        validate_block.check(topo, plan, where)  # the `validate:` block names real nodes
    except SpecError as e:  # a semantic error: point at its line in the file
        raise (located(e, read_yaml(source)[1]) if from_file else e) from None  # type: ignore[arg-type]
    return topo, plan


def rendered_lab(name: str) -> tuple[Plan, Rendered]:
    """A running lab's plan and configs, rendered as its `up` rendered them (with the
    --templates it recorded): what `save` and `export` of a lab start from."""
    plan = state.lab_plan(name)
    return plan, render(plan, (state.read(name) or {}).get("templates"))


def _claim_run_dir(lab: str) -> None:
    """Create the lab's run dir exclusively: the lock against a second `up` of the same name.
    0700 (rundirs: FRR's group may pass through it once daemons start); the run root is made
    0755 only if rocelab creates it."""
    rundirs.make_dirs(lab_run_dir(lab).parent, rundirs.RUN_ROOT_MODE)
    try:
        rundirs.make_private_dir(lab_run_dir(lab))
    except FileExistsError:
        raise LabExistsError(f"lab {lab} already exists (or a crash left it): "
                             f"run `rocelab down {lab}` first") from None


def _refuse_existing(plan: Plan) -> None:
    clash = [n.netns for n in plan.nodes if netns.exists(n.netns)]
    if clash:
        raise LabExistsError(f"lab {plan.lab}: namespace {clash[0]} already exists "
                             f"(run `rocelab down {plan.lab}` if it is a rocelab lab)")


@dataclass(frozen=True)
class Preflight:
    """What `up` knows before it creates anything: every config, every check passed."""

    topo: Topology
    plan: Plan
    rendered: Rendered
    est: estimate.Estimate  # the memory estimate
    source: str  # the topology file (resolved), or "<dict>"


def up(path: str | Path | Mapping[str, Any], name: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
       progress: Progress = _quiet, raise_neigh_limit: bool = False,
       templates: str | Path | None = None, metrics: str | None = None,
       expose_metrics: bool = False) -> UpResult:
    """`metrics`: ADDRESS:PORT to serve the lab's /metrics on (port 0: a free one), from
    an exporter process started with the lab and stopped by its `down`; a non-loopback
    address only with `expose_metrics` (`up --expose-metrics`)."""
    pre = preflight(path, name, templates, metrics, expose_metrics)  # nothing exists yet
    undo = contextlib.ExitStack()
    try:
        neighbour_budget(pre.plan, undo, raise_neigh_limit, progress)  # exit 12, or raised
        progress(f"estimate: {pre.est.summary()}")  # every check passed: a refusal stays one line
        result = build(pre, undo, timeout_s, progress, metrics, expose_metrics)
        undo.pop_all()  # success: the lab stays
    except BaseException:
        _unwind(undo)  # a second Ctrl-C or SIGTERM must not cut the rollback short
        raise
    return result


def preflight(path: str | Path | Mapping[str, Any], name: str | None,
              templates: str | Path | None, metrics: str | None,
              expose_metrics: bool) -> Preflight:
    """Validate, plan, render, and check what the machine must allow: touches nothing."""
    topo, plan, rendered = load_topology(path, name, templates)  # every config, in memory
    require_root()
    if metrics is not None:
        metrics_launch.check_listen(metrics, expose_metrics)  # refused before anything exists
    frr.check_user_configs(plan, rendered)  # FRR's parser on the user's own config: exit 2
    _refuse_existing(plan)
    est = estimate.check(plan)  # exit 12 when the machine cannot hold it
    source = "<dict>" if isinstance(path, Mapping) else str(Path(path).resolve())
    return Preflight(topo, plan, rendered, est, source)


def neighbour_budget(plan: Plan, undo: contextlib.ExitStack, raise_limit: bool,
                     progress: Progress) -> None:
    """The neighbour tables every namespace shares must hold the lab: HostLimitError (exit
    12) before anything exists, or (`raise_limit`) the one host-wide change, recorded and
    undone at the last down -- or by the rollback of this `up` when no other lab is left
    (registered first: runs last)."""
    undo.callback(neighbours.restore_if_idle)
    if raise_limit:
        for fam, value in neighbours.raise_for(plan).items():
            progress(f"raised net.{fam}.neigh.default.gc_thresh3 to {value} "
                     "(restored when the last lab is down)")
    neighbours.check(plan)


def build(pre: Preflight, undo: contextlib.ExitStack, timeout_s: float, progress: Progress,
          metrics: str | None = None, expose_metrics: bool = False) -> UpResult:
    """The transaction: each resource registers its undo on `undo` as soon as it exists."""
    plan, marks = pre.plan, {"start": time.monotonic()}
    record = _claim(pre, undo)  # the run dir (the lock), the tag sweep, the intent record
    progress(f"creating {len(plan.nodes)} namespaces and {len(plan.links)} links")
    exporter = _start_exporter(plan, undo, metrics, expose_metrics)  # overlaps the build
    realize(plan, undo, progress)  # namespaces, veths, addresses, routes, sysctls
    if exporter is not None:  # it failed already: say so now, not after convergence
        exporter.ready_now(metrics_launch.listening(exporter))
    _start_congestion(plan, undo, progress)  # shaped ports, ECN, PFC: one controller
    marks["realized"] = time.monotonic()
    daemons, marks["spawn_cpu_s"] = _start_daemons(plan, pre.rendered, undo, progress)
    record["daemons"] = [d.__dict__ for d in daemons]
    state.write(plan.lab, record)
    _apply_user_configs(plan, pre.rendered, progress)
    marks["daemons_started"] = time.monotonic()
    converge.wait(plan, timeout_s, progress, marks)  # fib -> bgp -> reach, to a deadline
    # rxe hosts' guests take the hosts' addresses over once routing is verified
    record["rxe"] = boot_hosts(plan, undo, progress)
    if record["rxe"]:
        marks["rxe_booted"] = time.monotonic()
    if exporter is not None:
        record["metrics"] = metrics_launch.wait(exporter)
        progress(f"serving metrics at {record['metrics']['url']}")
    timings = _timings(marks)
    state.write(plan.lab, record | {"status": "up", "timings": timings})
    return UpResult(plan, timings, daemons)


def _claim(pre: Preflight, undo: contextlib.ExitStack) -> dict[str, Any]:
    """The lab's run dir, claimed (its removal the first undo), the last sweep of its
    tagged processes registered, and the intent record written: `down` knows what may
    exist. The record, to be completed as the lab is built."""
    plan = pre.plan
    _claim_run_dir(plan.lab)
    undo.callback(shutil.rmtree, lab_run_dir(plan.lab), ignore_errors=True)
    # Whatever started but never made it into an undo (a signal inside Popen, the
    # controller before it reported ready) carries the lab's tag: the last sweep.
    undo.callback(procs.kill_tagged, plan.lab)
    record: dict[str, Any] = {"lab": plan.lab, "topology": pre.source,
                              "spec": pre.topo.model_dump(mode="json"), "status": "creating",
                              "namespaces": [n.netns for n in plan.nodes], "daemons": [],
                              "neigh_pinned": neighbours.pinned(plan),
                              "templates": pre.rendered.templates}
    state.write(plan.lab, record)  # intent first
    return record


def _start_exporter(plan: Plan, undo: contextlib.ExitStack, listen: str | None,
                    expose: bool) -> procs.Helper | None:
    """`up --metrics`: the exporter, started (its imports overlap the build), stopped by
    the rollback; waited for once the lab is up."""
    if listen is None:
        return None
    exporter = metrics_launch.start(plan, listen, expose)
    undo.callback(exporter.stop)
    return exporter


def _start_congestion(plan: Plan, undo: contextlib.ExitStack, progress: Progress) -> None:
    if not plan.congestion:
        return
    progress(f"shaping ports at {plan.congestion.rate_bps / 1e6:g} Mbit/s "
             f"(dilation {plan.congestion.dilation:g}), loading the BPF dataplane")
    undo.callback(procs.kill_pids, [start_controller(plan)], plan.lab)


def _apply_user_configs(plan: Plan, rendered: Rendered, progress: Progress) -> None:
    """The user's own FRR configuration, once each router's daemons are up."""
    if rendered.user:
        n = len(rendered.user)
        progress(f"applying your FRR configuration on {n} router{'s' if n != 1 else ''}")
        frr.apply_user_configs(plan, rendered)


def _unwind(undo: contextlib.ExitStack) -> None:
    """Run every undo with SIGINT and SIGTERM held. A signal that lands before they are
    held (a second Ctrl-C right after the first, under a handler that raises each time)
    starts the rollback again: the stack runs each undo once, so none runs twice."""
    while True:
        try:
            with signals_held():
                try:
                    netns.join_workers()  # a worker a signal orphaned registers its undo first
                finally:
                    undo.close()
            return
        except KeyboardInterrupt:
            continue


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM ignored for the duration (main thread only: elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:  # a signal between the two ignores below still gets both handlers back
        for s in saved:
            signal.signal(s, signal.SIG_IGN)
        yield
    finally:
        for s, handler in saved.items():
            if handler is not None:
                signal.signal(s, handler)


def _start_daemons(plan: Plan, rendered: Rendered, undo: contextlib.ExitStack,
                   progress: Progress) -> tuple[list[frr.Daemon], float]:
    frr.prepare_run_dirs(plan, rendered)
    if plan.frr_nodes:
        progress(f"starting FRR on {len(plan.frr_nodes)} routers")
    else:
        progress(f"{len(plan.routers)} bridges running 802.1D STP"
                 + (f" (forward delay {plan.l2.forward_delay_s} s: ports forward after "
                    f"{2 * plan.l2.forward_delay_s} s)" if plan.l2 and plan.l2.stp else ""))
    started: list[frr.Daemon] = []
    undo.callback(lambda: procs.kill_pids([d.pid for d in started], plan.lab))
    if not plan.frr_nodes:  # bridges only
        return started, frr.start_all(plan, started)
    n = len(plan.frr_nodes)
    with steps(progress, "daemons", n, "routers started") as phase:
        return started, frr.start_all(plan, started, lambda done, zebras: phase.update(
            done, f"{zebras}/{n} zebras spawned" if zebras < n else ""))


def _timings(m: dict[str, float]) -> dict[str, float]:
    def span(a: str, b: str) -> float:
        return round(m[b] - m[a], 3)

    return {"realize_s": span("start", "realized"),
            "daemons_start_s": span("realized", "daemons_started"),
            "bgp_converged_s": span("daemons_started", "bgp_converged"),
            "verified_s": span("bgp_converged", "verified"),
            "spawn_cpu_s": round(m["spawn_cpu_s"], 3),  # our CPU share of daemons_start_s
            "total_s": span("start", "verified")} | (
        {"rxe_boot_s": span("verified", "rxe_booted")} if "rxe_booted" in m else {})


@dataclass
class DownResult:
    lab: str
    processes: int
    namespaces: int
    run_dir: bool
    notes: list[str] = field(default_factory=list)  # what was left as it was, and why

    @property
    def found(self) -> bool:
        return bool(self.processes or self.namespaces or self.run_dir)


def down(lab: str, progress: Progress = _quiet) -> DownResult:
    """Remove a lab: its tagged processes, then its namespaces, then its run dir.
    `lab` must be a lab name (names.py): nothing is looked up or removed with any other.
    `progress`: processes stopped and namespaces removed so far (a big lab takes seconds)."""
    check_lab(lab)
    require_root()
    run_dir = own_run_dir(lab)  # first: a symlinked run dir is refused before anything is read
    record = state.read(lab) or {}
    exporter = metrics_launch.stop(lab)  # first: it reads every namespace about to go
    pids = _stop_processes(lab, record, progress) + ([exporter] if exporter else [])
    # Only namespaces named <lab>-*, and of those only the ones its tag says are the lab's.
    names = {n for n, tag in state.tagged_namespaces(f"{lab}-").items() if tag == lab}
    # Namespaces named in the intent record but not yet tagged (a crash mid-create).
    names |= {n for n in record.get("namespaces", []) if n.startswith(f"{lab}-") and netns.exists(n)}
    _remove_namespaces(lab, sorted(names), progress)
    if run_dir is not None:
        shutil.rmtree(run_dir, ignore_errors=True)
    notes = neighbours.restore_if_idle()  # the last lab: a raised neighbour limit goes back
    return DownResult(lab, len(pids), len(names), run_dir is not None, notes)


def _stop_processes(lab: str, record: dict[str, Any], progress: Progress) -> list[int]:
    """Signal every process tagged with the lab at once, then wait for them together. The
    FRR daemons the record names get SIGKILL: their namespaces go next, and a bgpd's
    orderly exit (notifying every peer) cost 68 routers ~0.9 s of CPU on two cores."""
    pids = [pid for pid, tag in procs.tagged_processes().items() if tag == lab]
    frr_pids = {d["pid"] for d in record.get("daemons", [])
                if isinstance(d, dict) and isinstance(d.get("pid"), int)}
    if pids:
        with steps(progress, f"down {lab}: processes", len(pids), "exited") as phase:
            procs.kill_pids(pids, lab, exited=phase.update, at_once=frr_pids)
    return pids


def _remove_namespaces(lab: str, names: list[str], progress: Progress) -> None:
    if not names:
        return
    with steps(progress, f"down {lab}: namespaces", len(names), "removed") as phase:
        def one(name: str) -> None:
            netns.remove(name)
            phase.advance()

        netns.parallel(one, names)


def down_all(prefix: str = "", progress: Progress = _quiet) -> list[DownResult]:
    """`down` every lab on this machine, or only those whose name starts with prefix."""
    require_root()
    return [down(lab, progress) for lab in sorted(state.known_labs()) if lab.startswith(prefix)]
