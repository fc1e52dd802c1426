"""MRC benchmark: clean-path goodput of one MRC connection against one RC QP, same run.

On an unshaped clos-2x4 (lab `bench-mrc`; $ROCELAB_BENCH_PREFIX replaces `bench-`),
prefill1 -> decode1 moves SIZE bytes `repeats` times each way, RC and MRC
interleaved so both see the same machine; the medians are compared (target:
MRC >= 0.9 of RC). Then one MRC transfer meets a silent leaf1-spine1 failure
once an eighth of its bytes are out: its longest interruption, retirements and
resent packets (the failure figures; RC's side of that comparison is the
`faults` section and the experiments of docs/mrc.md).

Run it with `python -m emulator.bench --only mrc` (root).
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import faults, lab, workload
from ..engine import client
from ..engine.job import Job, Op
from ..plan import Plan
from ..waiting import wait_until

SIZE = 128 << 20
TARGET_RATIO = 0.9


def run(repeats: int = 3, log: Callable[[str], None] = lambda m: print(m, file=sys.stderr)
        ) -> dict[str, Any]:
    name = os.environ.get("ROCELAB_BENCH_PREFIX", "bench-") + "mrc"
    try:
        plan = lab.up("topologies/clos-2x4.yaml", name=name).plan
        out = clean_path(plan, repeats, log)
        out["silent_link_failure"] = failure(plan, log)
    finally:
        lab.down(name)
    return out


def _one(plan: Plan, job: Job) -> dict[str, Any]:
    res = workload.run_transfer(plan, plan.node("prefill1"), plan.node("decode1"), job)
    if not res["integrity_ok"] or res.get("failed"):
        raise RuntimeError(f"bench transfer failed: {res.get('error')}")
    return dict(res)


def clean_path(plan: Plan, repeats: int, log: Callable[[str], None]) -> dict[str, Any]:
    runs: dict[str, list[float]] = {"rc": [], "mrc": []}
    for i in range(repeats):
        for transport in ("rc", "mrc"):
            res = _one(plan, Job(Op.WRITE, size=SIZE, transport=transport))
            runs[transport].append(res["goodput_gbps"])
            log(f"mrc bench {transport} run {i + 1}/{repeats}: {res['goodput_gbps']} Gbit/s")
    rc, mrc = statistics.median(runs["rc"]), statistics.median(runs["mrc"])
    return {"bytes": SIZE, "rc_goodput_gbps": rc, "mrc_goodput_gbps": mrc,
            "ratio": round(mrc / rc, 3) if rc else None, "target_ratio": TARGET_RATIO,
            "meets_target": bool(rc) and mrc / rc >= TARGET_RATIO, "runs": runs,
            "load_average_1m": os.getloadavg()[0]}


def failure(plan: Plan, log: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    job = Job(Op.WRITE, size=2 * SIZE, transport="mrc")
    t = threading.Thread(target=lambda: out.update(res=_one(plan, job)), daemon=True)
    t.start()
    fault = faults.link_fault(plan, "leaf1", "spine1", True)
    try:
        wait_until(lambda: "res" in out or _sent(plan) >= job.size // 8, timeout_s=120,
                   what="the MRC transfer under way")
        t_fail = time.monotonic()
        faults.fail(plan, fault)
        t.join(timeout=600)
        figures_end = time.monotonic()
    finally:
        faults.heal(plan, fault)
    res = out.get("res") or {}
    m = res.get("mrc") or {}
    figures = {"completed": bool(res) and not res.get("failed"),
               "longest_interruption_s": res.get("longest_interruption_s"),
               "retirements": m.get("retirements"),
               "retransmitted_packets": m.get("retransmitted_packets"),
               "goodput_gbps": res.get("goodput_gbps"),
               "fault_to_end_s": round(figures_end - t_fail, 3)}
    log(f"mrc bench silent failure: {figures}")
    return figures


def _sent(plan: Plan) -> int:
    try:
        stats = client.stats(plan, plan.node("prefill1"))
    except OSError:
        return 0
    return sum(p["bytes"] for e in stats["mrc"] if e["conn"] != "finished" for p in e["paths"])
