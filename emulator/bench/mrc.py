"""MRC benchmark: clean-path goodput of one MRC connection against one RC QP, same run.

On an unshaped clos-2x4 (lab `bench-mrc`; $ROCELAB_BENCH_PREFIX replaces `bench-`),
prefill1 -> decode1 moves SIZE bytes `repeats` times each way, RC and MRC
interleaved so both see the same machine; the medians are compared (target:
MRC >= 0.9 of RC), and so is each MRC run with the RC run just before it
(`pair_ratios`, their median `pair_ratio_median`). Beside goodput, each transfer's
CPU seconds in the two engines (prefill1's and decode1's processes, /proc/PID/stat;
`receiver_cpu_s`: decode1's alone):
on a loaded 2-core machine the goodput ratio moves with the other load, what each
transport costs per byte much less.
Then one MRC transfer meets a silent leaf1-spine1 failure once an eighth of its bytes
are out: its longest interruption, retirements and resent packets (the failure
figures; RC's side of that comparison is the `faults` section and the experiments of docs/mrc.md).

Run it with `python -m emulator.bench --only mrc` (root).
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import faults, lab, procs, workload
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
    cpu: dict[str, list[float]] = {"rc": [], "mrc": []}
    cpu_rx: dict[str, list[float]] = {"rc": [], "mrc": []}  # the receiving engine's share
    _one(plan, Job(Op.WRITE, size=1 << 20, transport="mrc"))  # both engines running
    engines = _engines(plan.lab, ("prefill1", "decode1"))
    receiver = _engines(plan.lab, ("decode1",))
    for i in range(repeats):
        for transport in ("rc", "mrc"):
            before, rx_before = _cpu_s(engines), _cpu_s(receiver)
            res = _one(plan, Job(Op.WRITE, size=SIZE, transport=transport))
            runs[transport].append(res["goodput_gbps"])
            cpu[transport].append(round(_cpu_s(engines) - before, 2))
            cpu_rx[transport].append(round(_cpu_s(receiver) - rx_before, 2))
            log(f"mrc bench {transport} run {i + 1}/{repeats}: {res['goodput_gbps']} Gbit/s, "
                f"{cpu[transport][-1]} CPU s")
    rc, mrc = statistics.median(runs["rc"]), statistics.median(runs["mrc"])
    # each MRC run against the RC run just before it: the two saw nearly the same machine,
    # so a load that drifts over the section moves both halves of a pair alike
    pairs = [round(m / r, 3) for r, m in zip(runs["rc"], runs["mrc"]) if r]
    rc_cpu, mrc_cpu = statistics.median(cpu["rc"]), statistics.median(cpu["mrc"])
    return {"bytes": SIZE, "rc_goodput_gbps": rc, "mrc_goodput_gbps": mrc,
            "ratio": round(mrc / rc, 3) if rc else None, "target_ratio": TARGET_RATIO,
            # best of each: what each transport can do when the 2 shared cores let it (the
            # median above swings with the machine even at load 1; docs/mrc.md "Speed")
            "best_ratio": round(max(runs["mrc"]) / max(runs["rc"]), 3) if rc else None,
            "pair_ratios": pairs, "pair_ratio_median": statistics.median(pairs) if pairs else None,
            "meets_target": bool(rc) and mrc / rc >= TARGET_RATIO, "runs": runs,
            "cpu_s": cpu, "cpu_ratio": round(mrc_cpu / rc_cpu, 3) if rc_cpu else None,
            "receiver_cpu_s": cpu_rx,
            "load_average_1m": os.getloadavg()[0]}


def _engines(lab_name: str, hosts: tuple[str, ...]) -> list[int]:
    """The PIDs of the lab's engine processes serving `hosts` (empty if not found)."""
    pids = []
    for pid, tag in procs.tagged_processes().items():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if tag == lab_name and b"emulator.engine.daemon" in argv and any(
                a == b"--host" and argv[k + 1].decode() in hosts for k, a in enumerate(argv[:-1])):
            pids.append(pid)
    return pids


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of `pids` so far (a process gone counts 0)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / os.sysconf("SC_CLK_TCK")


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
