"""Trace replay: is the replay's own scheduler ever the bottleneck?

The first 1,000 requests of the shipped Mooncake excerpt (5.5 minutes of trace) are
replayed on clos-2x4-cc (8 hosts, D = 4000) twice: at time scale 0.05 ("paced": the
arrivals 20 times faster than on the trace, sizes shrunk with them, docs/workloads.md;
below what the engines move) and 0.02 ("saturated": 50 times, more than the engines
move, so requests pile up towards the in-flight limit, 128). Reported: requests/s
replayed, the dispatcher's lateness p99 and the start lateness p99 (real-equivalent),
the scheduler's overhead (its dispatcher's CPU as a share of the run's wall time,
target < 5 %; beside it `client_share`, all its threads with the workers' engine calls)
and the most requests in flight (target >= 64: the saturated point). The baseline, in
the same run on the same lab: the engines alone, 256 transfers of the paced replay's
mean size issued 64 at a time with no schedule (workload.run_kv's pool): `vs_engine`
is each point's requests/s over theirs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from .. import lab, state, workload
from ..engine.job import Job, Op
from ..replay import run as replay_run
from ..replay.scheduler import Options, pools

NAME = os.environ.get("ROCELAB_BENCH_PREFIX", "bench-") + "rp"
ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = ROOT / "topologies" / "clos-2x4-cc.yaml"
TRACE = ROOT / "traces" / "mooncake-conversation-excerpt.jsonl"
TIME_SCALES = {"paced": 0.05, "saturated": 0.02}  # arrivals 20x / 50x the trace's
INFLIGHT = 128
TARGET_OVERHEAD, TARGET_INFLIGHT = 0.05, 64
BASELINE_TRANSFERS, BASELINE_CONCURRENCY = 256, 64


def run(repeats: int = 1, log=lambda m: print(m, file=sys.stderr)) -> dict[str, Any]:
    load0 = round(os.getloadavg()[0], 2)
    log(f"replay: bringing up {NAME}")
    lab.up(TOPOLOGY, name=NAME)
    try:
        plan = state.lab_plan(NAME)
        points = {}
        for label, k in TIME_SCALES.items():
            log(f"replay: {label}, time scale {k}")
            points[label] = _point(replay_run.replay(plan, TRACE, Options(time_scale=k, inflight=INFLIGHT),
                                                     budget_s=None), k)
        prefill, decode = pools(plan)
        mean = points["paced"]["bytes_each"]
        base = workload.run_kv(plan, list(zip(prefill, decode)), Job(Op.READ, size=mean),
                               BASELINE_TRANSFERS, BASELINE_CONCURRENCY)["aggregate"]
    finally:
        lab.down(NAME)
    engine_rps = base["transfers"] / max(base["wall_s"], 1e-9)
    sat = points["saturated"]
    for p in points.values():
        p["vs_engine"] = round(p["requests_per_s"] / engine_rps, 3) if engine_rps else None
    return {
        **points, "inflight_limit": INFLIGHT,
        "baseline": {"transfers": base["transfers"], "concurrency": BASELINE_CONCURRENCY,
                     "bytes_each": mean, "requests_per_s": round(engine_rps, 2)},
        "target": {"overhead_share_below": TARGET_OVERHEAD, "in_flight_at_least": TARGET_INFLIGHT},
        "meets_target": sat["overhead_share"] < TARGET_OVERHEAD and sat["max_in_flight"] >= TARGET_INFLIGHT,
        "load_average_1m": {"start": load0, "end": round(os.getloadavg()[0], 2)},
    }


def _point(block: dict[str, Any], k: float) -> dict[str, Any]:
    s, v = block["scheduler"], block["verdict"]
    return {"requests": v["requests"], "time_scale": k, "requests_per_s": s["requests_per_s"],
            "dispatch_lateness_p99_real_s": s["dispatch_lateness_p99_s"],
            "start_lateness_p99_real_s": s["lateness_p99_s"],
            "overhead_share": s["overhead_share"], "client_share": s["client_share"],
            "cpu_s": s["cpu_s"], "wall_s": s["wall_s"], "max_in_flight": s["max_in_flight"],
            "failed": v["failed"], "bytes_each": max(1, v["bytes_moved"] // max(1, v["requests"]))}
