"""Trace replay: is the replay's own scheduler ever the bottleneck?

The first 1,000 requests of the shipped Mooncake excerpt (5.5 minutes of trace) are
replayed on clos-2x4-cc (8 hosts, D = 4000) at time scale 0.05: the arrivals come 20
times faster than on the trace, sizes shrink with them (docs/workloads.md), so requests
pile up to the in-flight limit (128). Reported: requests/s replayed, the dispatcher's
lateness p99 and the start lateness p99 (real-equivalent), the scheduler's overhead
(its dispatcher's CPU as a share of the run's wall time, target < 5 %; and beside it
`client_share`, all its threads with the workers' engine calls) and the most requests
in flight (target >= 64). The baseline, in the same run on the same lab: the engines alone, 256
transfers of the replay's mean size issued 64 at a time with no schedule (workload.run_kv's
pool): `vs_engine` is the replay's requests/s over theirs.
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
TIME_SCALE = 0.05
INFLIGHT = 128
TARGET_OVERHEAD, TARGET_INFLIGHT = 0.05, 64
BASELINE_TRANSFERS, BASELINE_CONCURRENCY = 256, 64


def run(repeats: int = 1, log=lambda m: print(m, file=sys.stderr)) -> dict[str, Any]:
    load0 = round(os.getloadavg()[0], 2)
    log(f"replay: bringing up {NAME}")
    lab.up(TOPOLOGY, name=NAME)
    try:
        plan = state.lab_plan(NAME)
        block = replay_run.replay(plan, TRACE, Options(time_scale=TIME_SCALE, inflight=INFLIGHT),
                                  budget_s=None)
        s, v = block["scheduler"], block["verdict"]
        mean = max(1, v["bytes_moved"] // max(1, v["requests"]))
        prefill, decode = pools(plan)
        base = workload.run_kv(plan, list(zip(prefill, decode)), Job(Op.READ, size=mean),
                               BASELINE_TRANSFERS, BASELINE_CONCURRENCY)["aggregate"]
    finally:
        lab.down(NAME)
    engine_rps = base["transfers"] / max(base["wall_s"], 1e-9)
    return {
        "requests": v["requests"], "time_scale": TIME_SCALE, "inflight_limit": INFLIGHT,
        "requests_per_s": s["requests_per_s"],
        "dispatch_lateness_p99_real_s": s["dispatch_lateness_p99_s"],
        "start_lateness_p99_real_s": s["lateness_p99_s"],
        "overhead_share": s["overhead_share"], "client_share": s["client_share"],
        "cpu_s": s["cpu_s"], "wall_s": s["wall_s"],
        "max_in_flight": s["max_in_flight"], "failed": v["failed"],
        "baseline": {"transfers": base["transfers"], "concurrency": BASELINE_CONCURRENCY,
                     "bytes_each": mean, "requests_per_s": round(engine_rps, 2)},
        "vs_engine": round(s["requests_per_s"] / engine_rps, 3) if engine_rps else None,
        "target": {"overhead_share_below": TARGET_OVERHEAD, "in_flight_at_least": TARGET_INFLIGHT},
        "meets_target": s["overhead_share"] < TARGET_OVERHEAD and s["max_in_flight"] >= TARGET_INFLIGHT,
        "load_average_1m": {"start": load0, "end": round(os.getloadavg()[0], 2)},
    }
