"""Congestion-plane benchmark: shaping accuracy, PFC reaction time, DCQCN convergence.

- shaping: iperf3 UDP at twice the emulated line rate prefill1 -> decode1 in
  the lossy class; delivered L2 bytes at decode1's port / configured rate.
  Baseline in the same run: the same iperf3 on an unshaped lab path is the
  machine's ceiling, so the ratio shows the shaper, not the CPU, sets the rate.
- PFC: reaction time (threshold crossing in BPF -> TBF paused) p50/p99 over
  the pause-storm experiment.
- DCQCN: time for the incast to reach Jain >= 0.9, in real-equivalent time.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from .. import forwarding, lab, netns, state
from ..experiment import runner
from ..experiment.series import convergence_time

TOPOLOGY = "topologies/clos-2x4-cc.yaml"
NAME = "bench-cc"
IPERF_S = 4


def _iperf(plan, rate_bps: int) -> dict[str, Any]:
    src, dst = plan.node("prefill1"), plan.node("decode1")
    with netns.entered(dst.netns):
        server = subprocess.Popen(["iperf3", "-s", "-1", "-B", dst.address], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)  # iperf3 has no readiness signal; its own client retries are slower
        before = forwarding.port_counters(dst)["eth0"]["rx_bytes"]
        t0 = time.monotonic()
        with netns.entered(src.netns):
            subprocess.run(["iperf3", "-u", "-c", dst.address, "-b", str(2 * rate_bps), "-l", "1400",
                            "-t", str(IPERF_S), "--json"], capture_output=True, timeout=IPERF_S + 20)
        elapsed = time.monotonic() - t0
        after = forwarding.port_counters(dst)["eth0"]["rx_bytes"]
    finally:
        server.kill()
        server.wait()
    delivered = (after - before) * 8 / elapsed
    return {"configured_bps": rate_bps, "delivered_bps": round(delivered),
            "ratio": round(delivered / rate_bps, 4), "within_2pct": abs(delivered / rate_bps - 1) <= 0.02}


def run(repeats: int = 1, log=lambda m: print(m, file=sys.stderr)) -> dict[str, Any]:
    lab.up(TOPOLOGY, name=NAME)
    try:
        plan = state.lab_plan(NAME)
        cp = plan.congestion
        assert cp is not None, f"{TOPOLOGY} enables congestion"
        shaping = _iperf(plan, cp.rate_bps)
        log(f"congestion shaping: {shaping['delivered_bps'] / 1e6:.2f} of {cp.rate_bps / 1e6:g} Mbit/s")
        storm, _ = runner.run("experiments/pause-storm.yaml", name=NAME)
        incast, _ = runner.run("experiments/incast.yaml", name=NAME)
    finally:
        lab.down(NAME)
    series: dict[str, Sequence[tuple[float, float]]] = {
        f["name"]: _cumulative(f["rate_series"]) for f in incast["flows"]}
    start = min(f["start_s"] for f in incast["flows"])
    end = min(f["end_s"] for f in incast["flows"] if f["end_s"])
    conv = convergence_time(series, start, end, window=1.0)
    return {
        "dilation": cp.dilation, "link_rate_bps": cp.rate_bps, "shaping": shaping,
        "pfc_reaction_us": {"p50": storm["pfc"]["reaction_us_p50"],
                            "p99": storm["pfc"]["reaction_us_p99"], "pauses": storm["pfc"]["pauses"]},
        "dcqcn_incast": {"jain_steady": round(incast["steady"]["jain"], 4),
                         "convergence_wall_s": conv,
                         "convergence_real_us": None if conv is None
                         else round(plan.dilation.real_s(conv) * 1e6, 1),
                         "pauses": incast["pfc"]["pauses"], "lossless_drops": incast["lossless_drops"],
                         # target >= 0.9 of the shaped rate, the queue held under Kmax
                         "bottleneck": incast["steady"]["bottleneck"]},
    }


def _cumulative(rate_series: Sequence[Sequence[float]]) -> list[tuple[float, float]]:
    """[(t, bps)] between samples -> [(t, cumulative bytes)]."""
    out, total, prev = [], 0.0, None
    for t, bps in rate_series:
        if prev is not None:
            total += bps / 8 * (t - prev)
        out.append((t, total))
        prev = t
    return out
