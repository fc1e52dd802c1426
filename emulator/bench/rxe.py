"""rxe benchmark: what an rxe host costs -- boot (QEMU start to the agent's hello), QEMU's
resident memory, and an agent round trip -- on clos-2x4-rxe (two guests, booted in
parallel by `up`).

Baseline, measured in the same run on the same lab: an engine host's cost -- the
seconds from starting rocelab's engine daemon on prefill2 (an engine host of the
same lab) to its socket answering, and that daemon's RSS. The guest is the price of
running the kernel's own Soft-RoCE instead of the engine; the ratio says how much.

One `up` per repeat (each boots both guests; ~10-12 s under TCG), at most two
(~30 s for the section); medians are reported with every run.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from .. import lab, procs, state
from ..engine import client
from ..rxe.hosts import vm_for

TOPOLOGY = "topologies/clos-2x4-rxe.yaml"
NAME = "bench-rxe"
ENGINE_HOST = "prefill2"
BUDGET_S = 30.0  # past this no further repeat starts
MAX_REPEATS = 2  # each boots two guests: two runs are enough to see the spread
ROUND_TRIPS = 5


def _engine_pid(name: str, host: str) -> int | None:
    for pid, tag in procs.tagged_processes().items():
        if tag != name:
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"emulator.engine.daemon" in cmd and host.encode() in cmd:
            return pid
    return None


def one_run(log) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        lab.up(TOPOLOGY, name=NAME)
        up_s = time.monotonic() - t0
        rxe = (state.read(NAME) or {}).get("rxe") or {}
        plan = state.lab_plan(NAME)
        time.sleep(1.0)  # the agent's first requests settle; RSS after boot, idle
        guests = {h: {"boot_s": info["boot_s"],
                      "rss_mib": round((procs.rss_kib(int(info["pid"])) or 0) / 1024, 1)}
                  for h, info in sorted(rxe.items())}
        vm = vm_for(plan, plan.node(sorted(rxe)[0]))
        trips = []
        for _ in range(ROUND_TRIPS):
            t = time.monotonic()
            vm.exec(["true"], timeout=10)
            trips.append(time.monotonic() - t)
        host = plan.node(ENGINE_HOST)
        t = time.monotonic()
        client.ensure_engines(plan, [host])
        engine_start_s = time.monotonic() - t
        pid = _engine_pid(NAME, ENGINE_HOST)
        engine_rss = round((procs.rss_kib(pid) or 0) / 1024, 1) if pid else None
    finally:
        lab.down(NAME)
    boot = [g["boot_s"] for g in guests.values()]
    rss = [g["rss_mib"] for g in guests.values()]
    return {"up_s": round(up_s, 2), "guests": guests,
            "boot_s_max": max(boot), "rss_mib_per_guest": round(statistics.mean(rss), 1),
            "exec_true_round_trip_s": round(statistics.median(trips), 3),
            "baseline_engine_start_s": round(engine_start_s, 3),
            "baseline_engine_rss_mib": engine_rss}


def run(repeats: int = 3, log=lambda m: print(m, file=sys.stderr)) -> dict[str, Any]:
    from ..rxe import guest

    if guest.installed() is None:
        return {"skipped": "no rxe guest kernel (make setup)"}
    runs: list[dict[str, Any]] = []
    t0 = time.monotonic()
    for i in range(min(repeats, MAX_REPEATS)):
        if runs and time.monotonic() - t0 > BUDGET_S:
            break
        runs.append(one_run(log))
        log(f"rxe run {i + 1}/{repeats}: boot {runs[-1]['boot_s_max']:.1f} s, "
            f"{runs[-1]['rss_mib_per_guest']:.0f} MiB per guest")
    keys = ("up_s", "boot_s_max", "rss_mib_per_guest", "exec_true_round_trip_s",
            "baseline_engine_start_s", "baseline_engine_rss_mib")
    median = {k: round(statistics.median(r[k] for r in runs if r[k] is not None), 3) for k in keys
              if any(r[k] is not None for r in runs)}
    out: dict[str, Any] = {"topology": TOPOLOGY, "guests": len(runs[0]["guests"]),
                           "median": median, "runs": runs}
    if median.get("baseline_engine_start_s"):
        out["boot_vs_engine_start"] = round(median["boot_s_max"] / median["baseline_engine_start_s"], 1)
    if median.get("baseline_engine_rss_mib"):
        out["rss_vs_engine"] = round(median["rss_mib_per_guest"] / median["baseline_engine_rss_mib"], 1)
    return out
