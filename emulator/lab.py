"""Lab lifecycle: `up` as a transaction, `down` from kernel state.

up:   topology file -> spec -> plan -> rendered configs (all pure, all before
      any kernel object) -> realize -> FRR daemons -> converged.
      Every created resource registers its undo at once; any failure (or
      Ctrl-C, or SIGTERM) unwinds everything before the error is reported.
down: find the lab's processes and namespaces from the kernel, stop them,
      remove the run dir. Idempotent; needs no state file.

`up --metrics ADDR:PORT` also starts the lab's Prometheus exporter: a process
of its own in the root namespace, tagged like every lab process, its PID and
URL in <run dir>/exporter.json; `down` stops it by that PID (and the tag
sweep finds it after a crash).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import converge, estimate, frr, neighbours, netns, rundirs, state, validate_block
from .congestion.launch import start_controller
from .errors import LabExistsError, NotRootError, RocelabError, SpecError
from .hosts import boot as boot_hosts
from .names import check_lab
from .paths import lab_run_dir, own_run_dir
from .plan import Plan, compile_plan
from .realize import realize
from .render import Rendered, render
from .spec import Topology, load, located, parse, read_yaml

Progress = Callable[[str], None]
DEFAULT_TIMEOUT_S = 60.0
EXPORTER_FILE = "exporter.json"  # in the run dir: {"pid", "url", "listen"} of up --metrics
EXPORTER_START_S = 30.0  # for the exporter to listen (it starts while the lab is built)


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
    return topo, plan, render(plan, templates)


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


def up(path: str | Path | Mapping[str, Any], name: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
       progress: Progress = _quiet, raise_neigh_limit: bool = False,
       templates: str | Path | None = None, metrics: str | None = None,
       expose_metrics: bool = False) -> UpResult:
    """`metrics`: ADDRESS:PORT to serve the lab's /metrics on (port 0: a free one), from
    an exporter process started with the lab and stopped by its `down`; a non-loopback
    address only with `expose_metrics` (`up --expose-metrics`)."""
    # every config exists before any kernel object
    topo, plan, rendered = load_topology(path, name, templates)
    require_root()
    if metrics is not None:
        check_listen(metrics, expose_metrics)  # refused before anything exists
    frr.check_user_configs(plan, rendered)  # FRR's parser on the user's own config: exit 2
    _refuse_existing(plan)
    est = estimate.check(plan)  # exit 12 when the machine cannot hold it
    undo = contextlib.ExitStack()
    # the one host-wide change, asked for, recorded, undone at the last down -- or by the
    # rollback of this `up` when no other lab is left (registered first: runs last)
    undo.callback(neighbours.restore_if_idle)
    try:
        if raise_neigh_limit:
            for fam, value in neighbours.raise_for(plan).items():
                progress(f"raised net.{fam}.neigh.default.gc_thresh3 to {value} "
                         "(restored when the last lab is down)")
        neighbours.check(plan)  # exit 12 before anything exists: a full table breaks every lab
    except BaseException:
        _unwind(undo)  # the limit it raised is put back, whatever signal comes next
        raise
    progress(f"estimate: {est.summary()}")  # every check passed: a refusal stays one line
    marks = {"start": time.monotonic()}
    source = "<dict>" if isinstance(path, Mapping) else str(Path(path).resolve())
    record: dict[str, Any] = {"lab": plan.lab, "topology": source,
                              "spec": topo.model_dump(mode="json"), "status": "creating",
                              "namespaces": [n.netns for n in plan.nodes], "daemons": [],
                              "neigh_pinned": neighbours.pinned(plan),
                              "templates": rendered.templates}
    try:
        _claim_run_dir(plan.lab)
        undo.callback(shutil.rmtree, lab_run_dir(plan.lab), ignore_errors=True)
        # Whatever started but never made it into an undo (a signal inside Popen, the
        # controller before it reported ready) carries the lab's tag: the last sweep.
        undo.callback(kill_tagged, plan.lab)
        state.write(plan.lab, record)  # intent first: `down` knows what may exist
        progress(f"creating {len(plan.nodes)} namespaces and {len(plan.links)} links")
        exporter = None
        if metrics is not None:  # its start-up (imports) overlaps the build; waited for below
            exporter = start_exporter(plan, metrics, expose_metrics)
            undo.callback(state.kill_pids, [exporter.pid], plan.lab)
        realize(plan, undo)
        if exporter is not None and exporter.poll() is not None:  # it failed: say so now
            wait_exporter(plan, exporter)
        if plan.congestion:  # shaped ports, ECN, PFC: one controller owns the BPF dataplane
            progress(f"shaping ports at {plan.congestion.rate_bps / 1e6:g} Mbit/s "
                     f"(dilation {plan.congestion.dilation:g}), loading the BPF dataplane")
            undo.callback(state.kill_pids, [start_controller(plan)], plan.lab)
        marks["realized"] = time.monotonic()
        daemons, marks["spawn_cpu_s"] = _start_daemons(plan, rendered, undo, progress)
        record["daemons"] = [d.__dict__ for d in daemons]
        state.write(plan.lab, record)
        if rendered.user:  # the user's own FRR configuration, once each router's daemons are up
            n = len(rendered.user)
            progress(f"applying your FRR configuration on {n} router{'s' if n != 1 else ''}")
            frr.apply_user_configs(plan, rendered)
        marks["daemons_started"] = time.monotonic()
        converge.wait(plan, timeout_s, progress, marks)
        # rxe hosts' guests take the hosts' addresses over once routing is verified
        record["rxe"] = boot_hosts(plan, undo, progress)
        timings = _timings(marks)
        if record["rxe"]:
            timings["rxe_boot_s"] = round(time.monotonic() - marks["verified"], 3)
        if exporter is not None:
            record["metrics"] = wait_exporter(plan, exporter)
            progress(f"serving metrics at {record['metrics']['url']}")
        state.write(plan.lab, record | {"status": "up", "timings": timings})
        undo.pop_all()  # success: the lab stays
    except BaseException:
        _unwind(undo)  # a second Ctrl-C or SIGTERM must not cut the rollback short
        raise
    return UpResult(plan, timings, daemons)


def check_listen(listen: str, expose: bool = False) -> None:
    """The exporter could listen at ADDRESS:PORT now (a local address, a free port), and
    a non-loopback address is asked for (`expose`)."""
    from .metrics.exporter import EXPOSE_FLAGS, Listen

    where = Listen.parse(listen)
    where.check_exposure(expose, EXPOSE_FLAGS["up"])
    family = socket.AF_INET6 if ":" in where.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as http.server binds
        try:
            s.bind((where.host, where.port))
        except OSError as e:
            raise RocelabError(f"--metrics {listen}: cannot listen there ({e.strerror or e}); "
                               "give a local address and a free port (port 0: any free one)"
                               ) from None


def start_exporter(plan: Plan, listen: str, expose: bool = False) -> subprocess.Popen[bytes]:
    """The lab's exporter (emulator/metrics/exporter.py): in the root namespace, with the
    lab's tag, in a session of its own (a Ctrl-C at the terminal is for `up`, not it)."""
    run_dir = lab_run_dir(plan.lab)
    with rundirs.open_private(run_dir / "exporter.log") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "emulator.metrics.exporter", "--lab", plan.lab,
             "--listen", listen, "--ready", str(run_dir / EXPORTER_FILE),
             *(["--expose"] if expose else [])],
            env=state.base_env(plan.lab), stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True, umask=rundirs.HELPER_UMASK)


def wait_exporter(plan: Plan, proc: subprocess.Popen[bytes],
                  timeout_s: float = EXPORTER_START_S) -> dict[str, Any]:
    """{"pid", "url", "listen"} once the exporter listens; RocelabError with its words
    if it exits first or takes too long."""
    run_dir = lab_run_dir(plan.lab)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = exporter_info(plan.lab)
        if info is not None and info.get("pid") == proc.pid:
            return info
        if proc.poll() is not None:
            said = (run_dir / "exporter.log").read_text(errors="replace").strip().splitlines()
            raise RocelabError(f"the metrics exporter exited ({proc.returncode}): "
                               + (said[-1] if said else "no output"))
        time.sleep(0.05)
    raise RocelabError(f"the metrics exporter did not listen within {timeout_s:.0f} s "
                       f"(see {run_dir / 'exporter.log'})")


def exporter_info(lab: str) -> dict[str, Any] | None:
    """The lab's exporter as it announced itself (None: the lab was not started with one)."""
    try:
        info = json.loads((lab_run_dir(lab) / EXPORTER_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return info if isinstance(info, dict) else None


def stop_exporter(lab: str) -> int | None:
    """Stop the exporter `up --metrics` recorded, by its PID, if that PID is still the
    lab's (its environment carries the lab's tag: a reused PID is left alone)."""
    info = exporter_info(lab)
    pid = info.get("pid") if info else None
    if not isinstance(pid, int) or state.process_tag(pid) != lab:
        return None
    state.kill_pids([pid], lab)
    return pid


def kill_tagged(lab: str) -> list[int]:
    """Stop every process carrying this lab's tag (by PID, from /proc); their PIDs."""
    pids = [pid for pid, tag in state.tagged_processes().items() if tag == lab]
    state.kill_pids(pids, lab)
    return pids


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
    undo.callback(lambda: state.kill_pids([d.pid for d in started], plan.lab))
    return started, frr.start_all(plan, started)


def _timings(m: dict[str, float]) -> dict[str, float]:
    def span(a: str, b: str) -> float:
        return round(m[b] - m[a], 3)

    return {"realize_s": span("start", "realized"),
            "daemons_start_s": span("realized", "daemons_started"),
            "bgp_converged_s": span("daemons_started", "bgp_converged"),
            "verified_s": span("bgp_converged", "verified"),
            "spawn_cpu_s": round(m["spawn_cpu_s"], 3),  # our CPU share of daemons_start_s
            "total_s": span("start", "verified")}


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


def down(lab: str) -> DownResult:
    """Remove a lab: its tagged processes, then its namespaces, then its run dir.
    `lab` must be a lab name (names.py): nothing is looked up or removed with any other."""
    check_lab(lab)
    require_root()
    run_dir = own_run_dir(lab)  # first: a symlinked run dir is refused before anything is read
    record = state.read(lab) or {}
    exporter = stop_exporter(lab)  # first: it reads every namespace about to go
    pids = kill_tagged(lab) + ([exporter] if exporter else [])
    names = {n for n, tag in state.tagged_namespaces().items() if tag == lab}
    # Namespaces named in the intent record but not yet tagged (a crash mid-create).
    names |= {n for n in record.get("namespaces", []) if n.startswith(f"{lab}-") and netns.exists(n)}
    netns.parallel(netns.remove, sorted(names))
    if run_dir is not None:
        shutil.rmtree(run_dir, ignore_errors=True)
    notes = neighbours.restore_if_idle()  # the last lab: a raised neighbour limit goes back
    return DownResult(lab, len(pids), len(names), run_dir is not None, notes)


def down_all(prefix: str = "") -> list[DownResult]:
    """`down` every lab on this machine, or only those whose name starts with prefix."""
    require_root()
    return [down(lab) for lab in sorted(state.known_labs()) if lab.startswith(prefix)]
