"""One replay from trace file to results: read, schedule, judge (`rocelab replay`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..plan import Plan
from ..stats import percentile
from . import reader, verdict
from .scaling import default_budget_s
from .scheduler import Options, Progress, Scheduler


def replay(plan: Plan, trace: str | Path, opts: Options, budget_s: float | None = None,
           start_s: float = 0.0, for_s: float | None = None,
           progress: Progress | None = None) -> dict[str, Any]:
    """Replay the window of `trace` on the running lab `plan`; results.json's `replay` block."""
    requests = reader.read(trace, start_s, for_s)  # every line checked before anything moves
    budget = budget_s if budget_s is not None else default_budget_s(opts.model)
    sched = Scheduler(plan, requests, opts, progress)
    records = sched.run()
    nic = {h: sum(i.speed_bps for i in sched.hosts[h].interfaces) or float("inf") for h in sched.hosts}
    table = verdict.rows(records, sched.scale, nic)
    window = requests[-1].t_ms / 1000 if requests else 0.0
    return {
        "trace": {"file": Path(trace).name, "from_s": start_s, "for_s": for_s,
                  "requests": len(requests), "span_s": round(window, 3)},
        "model": opts.model, "dtype": opts.dtype, "placement": opts.placement, "op": opts.op.value,
        "prefix_cache_bytes": opts.cache_bytes,
        "budget_s": budget, "budget_default": budget_s is None,
        "scale": {"dilation": sched.scale.dilation, "time_scale": sched.scale.time_scale,
                  "size_factor": sched.scale.size_factor},
        "bytes_per_token": sched.bytes_per_token,
        "verdict": verdict.summarize(table, budget, sched.bytes_per_token,
                                     bin_s=max(1.0, round(window / 40))),
        "scheduler": scheduler_numbers(sched, table),
        "requests": table,
    }


def scheduler_numbers(sched: Scheduler, table: list[dict[str, Any]]) -> dict[str, Any]:
    """How well the replay kept time, and what it cost: lateness (real-equivalent) of the
    dispatcher (handing a request over after its due time) and of the start (a worker
    taking it: also the wait for a free one); the scheduler's overhead, its dispatcher's
    CPU (timing, placement, the caches, handing over) against the run's wall time, and
    beside it the CPU of all its threads, workers' engine calls included (`client_share`:
    what any `kv` run pays per transfer) and of the whole process (an experiment's
    samplers included); peak requests in flight."""
    late = [r["lateness_s"] for r in table]
    dispatch = [sched.scale.real_s(max(0.0, r.dispatch_s - r.due_s)) for r in sched.records]
    wall = max(sched.wall_s, 1e-9)
    cpu = sched.dispatch_cpu_s + sched.worker_cpu_s  # the scheduler's own threads
    return {"wall_s": round(sched.wall_s, 3), "requests_per_s": round(len(table) / wall, 2),
            "dispatch_lateness_p99_s": round(percentile(dispatch, 99), 6),
            "lateness_p50_s": round(percentile(late, 50), 6),
            "lateness_p99_s": round(percentile(late, 99), 6),
            "dispatch_cpu_s": round(sched.dispatch_cpu_s, 3),
            "overhead_share": round(sched.dispatch_cpu_s / wall, 4),
            "cpu_s": round(cpu, 3), "client_share": round(cpu / wall, 4),
            "process_cpu_s": round(sched.cpu_s, 3),
            "max_in_flight": sched.max_inflight, "inflight_limit": sched.opts.inflight}
