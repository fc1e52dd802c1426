"""Scale benchmark: bring-up time and memory against router count (8, 32, 80, 132 routers).

For each fabric: `up` to converged (its phases), the machine's memory it took
(MemAvailable before and after, so the kernel's share counts), the FRR daemons'
RSS, and the estimate `render` prints beside it. Target: the 3-tier fabric of
>= 128 routers and >= 512 hosts converged in <= 90 s using <= 8 GB.

Baseline, measured in the same run on the biggest lab: one round of the
convergence poll's FIB read with pyroute2 (what the poll did before; ~20 s at
132 routers) against the raw rtnetlink dump it uses now.
"""

from __future__ import annotations

import socket
import sys
import time
from typing import Any

from pyroute2 import IPRoute

from .. import converge, estimate, lab, netns
from .fabric import router_rss_mb

FABRICS: dict[str, dict[str, Any]] = {
    "2x6": {"spines": 2, "leaves": 6, "hosts": {"per_leaf": 4}},
    "8x24": {"spines": 8, "leaves": 24, "hosts": {"per_leaf": 4}},
    "16x64": {"spines": 16, "leaves": 64, "hosts": {"per_leaf": 4}},
    "3tier-8pods": {"pods": 8, "superspines": 4, "spines": 4, "leaves": 12, "hosts": {"per_leaf": 6}},
}
TARGET_S = 90.0
TARGET_MB = 8 * 1024
TIMEOUT_S = 240.0


def _pyroute2_widths(node: Any) -> dict[str, int]:
    with netns.entered(node.netns), IPRoute() as ipr:
        routes = ipr.get_routes(family=socket.AF_INET, table=254)
    return {f"{r.get_attr('RTA_DST')}/{r['dst_len']}": len(r.get_attr("RTA_MULTIPATH") or [None])
            for r in routes if r.get_attr("RTA_DST")}


def fib_read_baseline(plan: Any) -> dict[str, float]:
    """Seconds for one FIB read of every router: pyroute2 (before) and rtnl (now)."""
    t = time.monotonic()
    old = netns.parallel(_pyroute2_widths, plan.frr_nodes)
    pyroute2_s = time.monotonic() - t
    t = time.monotonic()
    new = netns.parallel(converge.route_widths, plan.frr_nodes)
    rtnl_s = time.monotonic() - t
    assert old == new, "the two FIB readers disagree"
    return {"fib_read_pyroute2_s": round(pyroute2_s, 2), "fib_read_rtnl_s": round(rtnl_s, 3),
            "fib_read_speedup": round(pyroute2_s / rtnl_s, 1)}


def one(key: str, shape: dict[str, Any], baseline: bool) -> dict[str, Any]:
    name = f"bench-scale-{key}"
    topo = {"name": name} | shape
    plan = lab.load_topology(topo)[1]
    est = estimate.estimate(plan)
    before = estimate.available_mb()
    try:
        result = lab.up(topo, timeout_s=TIMEOUT_S)
        used = before - estimate.available_mb()
        rss = router_rss_mb(name)
        extra = fib_read_baseline(plan) if baseline else {}
    finally:
        t = time.monotonic()
        lab.down(name)
        down_s = time.monotonic() - t
    return {"routers": len(plan.routers), "hosts": len(plan.hosts), "namespaces": len(plan.nodes),
            "links": len(plan.links), "converged_s": result.timings["total_s"],
            "timings": result.timings, "memory_mb": used, "frr_rss_mb": rss,
            "estimate_mb": est.memory_mb, "estimate_ratio": round(est.memory_mb / max(used, 1), 2),
            "down_s": round(down_s, 2), **extra}


def run(repeats: int = 1, log=lambda m: print(m, file=sys.stderr)) -> dict[str, Any]:
    """One run per fabric (each is minutes at the top): `repeats` is not used here."""
    del repeats
    out: dict[str, Any] = {"fabrics": {}}
    keys = list(FABRICS)
    for key in keys:
        row = one(key, FABRICS[key], baseline=key == keys[-1])
        out["fabrics"][key] = row
        log(f"scale {key}: {row['routers']} routers, {row['hosts']} hosts converged in "
            f"{row['converged_s']:.1f} s, {row['memory_mb']} MB (estimate {row['estimate_mb']} MB)")
    top = out["fabrics"][keys[-1]]
    small = out["fabrics"][keys[0]]
    out["target"] = {"routers_min": 128, "hosts_min": 512, "converged_s_max": TARGET_S,
                     "memory_mb_max": TARGET_MB}
    out["meets_target"] = (top["routers"] >= 128 and top["hosts"] >= 512
                           and top["converged_s"] <= TARGET_S and top["memory_mb"] <= TARGET_MB)
    out["s_per_router_vs_smallest"] = round(
        (top["converged_s"] / top["routers"]) / (small["converged_s"] / small["routers"]), 2)
    return out
