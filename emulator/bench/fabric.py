"""Fabric benchmark: seconds from `up` to converged, by phase, and router memory.

Baseline, measured in the same run on the same plan: the way munet (the
engine under FRR's topotests) builds a lab -- one `ip` subprocess per
namespace, sysctl, link, address and state change, one at a time. Its time is
compared with rocelab's realize phase (the part that baseline covers).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from typing import Any

from .. import lab, procs
from ..plan import Plan
from ..realize import COMMON_SYSCTLS, ROUTER_SYSCTLS

TARGETS_S = {"clos-2x4": 1.5, "clos-8x16": 8.0, "clos-3tier": 3.0, "rail-4x8": 3.0}
ORCHESTRATION_SHARE_MAX = 0.25
PREFIX = os.environ.get("ROCELAB_BENCH_PREFIX", "bench-")  # labs: <prefix><stem>


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def baseline_realize(plan: Plan) -> float:
    """Build the plan's namespaces and links with sequential `ip` commands; return seconds."""
    t0 = time.monotonic()
    try:
        for node in plan.nodes:
            _ip("netns", "add", node.netns)
            _ip("-n", node.netns, "link", "set", "lo", "alias", f"rocelab:{plan.lab}", "up")
            sysctls = COMMON_SYSCTLS | (ROUTER_SYSCTLS if node.is_router else {})
            for key, value in sysctls.items():
                _ip("netns", "exec", node.netns, "sysctl", "-qw", f"{key.replace('/', '.')}={value}")
        for link in plan.links:
            a, b = plan.node(link.a), plan.node(link.b)
            _ip("-n", a.netns, "link", "add", link.a_ifname, "type", "veth", "peer", "name",
                link.b_ifname, "netns", b.netns)
        for node in plan.nodes:
            if node.loopback:
                _ip("-n", node.netns, "addr", "add", f"{node.loopback}/32", "dev", "lo")
            for port in node.interfaces:
                _ip("-n", node.netns, "link", "set", port.name, "mtu", str(plan.mtu))
                if port.address:
                    _ip("-n", node.netns, "addr", "add", port.address, "dev", port.name)
                _ip("-n", node.netns, "link", "set", port.name, "up")
            if node.gateway:
                _ip("-n", node.netns, "route", "add", "default", "via", node.gateway)
        return time.monotonic() - t0
    finally:
        lab.down(plan.lab)


def router_rss_mb(name: str) -> float:
    total_kb = sum(procs.rss_kib(pid) or 0 for pid, tag in procs.tagged_processes().items()
                   if tag == name)
    return round(total_kb / 1024, 1)


def one_run(topology: str, name: str) -> dict[str, Any]:
    try:
        result = lab.up(topology, name=name)
        rss = router_rss_mb(name)
    finally:
        t_down = time.monotonic()
        lab.down(name)
        down_s = time.monotonic() - t_down
    t = result.timings
    # Everything but FRR's own work: building the kernel objects, our CPU spent
    # spawning daemons, and verification. (Daemon start-up wall time is FRR's.)
    orchestration = t["realize_s"] + t["verified_s"] + t["spawn_cpu_s"]
    return t | {"down_s": round(down_s, 3), "router_rss_mb": rss,
                "load_average_1m": round(os.getloadavg()[0], 2),
                "orchestration_s": round(orchestration, 3),
                "orchestration_share": round(orchestration / t["total_s"], 3)}


def run(repeats: int = 3, log=lambda m: print(m, file=sys.stderr)) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stem, target in TARGETS_S.items():
        topology = f"topologies/{stem}.yaml"
        runs = []
        for i in range(repeats):
            runs.append(one_run(topology, f"{PREFIX}{stem.replace('clos-', '')}"))
            log(f"fabric {stem} run {i + 1}/{repeats}: {runs[-1]['total_s']:.2f} s")
        median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        _, plan, _ = lab.load_topology(topology, f"{PREFIX}base-{stem.replace('clos-', '')}")
        base = baseline_realize(plan)
        log(f"fabric {stem} baseline (sequential ip commands): realize {base:.2f} s")
        out[stem] = {
            "median": median, "runs": runs, "target_total_s": target,
            "meets_target": median["total_s"] <= target,
            "meets_orchestration_share": median["orchestration_share"] <= ORCHESTRATION_SHARE_MAX,
            "baseline_sequential_ip_realize_s": round(base, 3),
            "realize_speedup_vs_baseline": round(base / median["realize_s"], 1),
        }
    return out
