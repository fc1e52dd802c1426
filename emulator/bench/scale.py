"""Scale benchmark: time (per phase) and memory against routers, 8 -> 264 routers.

Each fabric of the curve is brought up to converged and taken down, one after the other:
its `up` phases (realize, daemons, BGP, verify), the memory it holds (its processes' PSS
and what the kernel grew by: `memory_mb`; MemAvailable before and after `up`, and what
`down` gave back, are reported beside it, but other labs on the machine move them), the
FRR daemons' RSS and CPU seconds, and the estimate `render` prints beside it (its error).
The 3-tier fabrics announce one /24 per leaf (`bgp.aggregate_hosts`, docs/scale.md).
Target: >= 256 routers and >= 1,024 hosts converged in <= 90 s within 12 GB, the
estimate within 20 % at every size.

Baseline, measured in the same run: the 132-router fabric as it was built before
(a /31 per host NIC), and on it one round of the convergence poll's FIB read with
pyroute2 (the poll before issue 16) against the raw rtnetlink dump it uses now.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any

from pyroute2 import IPRoute

from .. import converge, estimate, lab, netns, procs
from .fabric import router_rss_mb

AGGREGATED = {"aggregate_hosts": True}
BIG_POOLS = {"loopbacks": "10.0.0.0/22"}  # more than 254 routers


def _three_tier(pods: int, superspines: int, spines: int = 4, leaves: int = 12,
                per_leaf: int = 6, bgp: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"pods": pods, "superspines": superspines, "spines": spines, "leaves": leaves,
            "hosts": {"per_leaf": per_leaf}, "pools": BIG_POOLS,
            "bgp": AGGREGATED if bgp is None else bgp}


FABRICS: dict[str, dict[str, Any]] = {  # the curve, smallest first
    "r8": {"spines": 2, "leaves": 6, "hosts": {"per_leaf": 4}, "bgp": AGGREGATED},
    "r24": _three_tier(pods=2, superspines=4, spines=2, leaves=8),
    "r66": _three_tier(pods=4, superspines=2),
    "r132": _three_tier(pods=8, superspines=4),
    "r264": _three_tier(pods=16, superspines=8),
}
BASELINE = ("r132-per-host", _three_tier(pods=8, superspines=4, bgp={}))
TARGET = {"routers_min": 256, "hosts_min": 1024, "converged_s_max": 90.0,
          "memory_mb_max": 12 * 1024, "estimate_error_max": 0.20}
TIMEOUT_S = 600.0
PREFIX = os.environ.get("ROCELAB_BENCH_PREFIX", "bench-")  # labs: <prefix>scale-<key>


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


def frr_cpu_s(name: str) -> dict[str, float]:
    """CPU seconds (user + system) each FRR daemon kind of lab `name` has spent."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for pid, tag in procs.tagged_processes().items():
        if tag != name:
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
        except OSError:  # gone meanwhile
            continue
        out[comm] = round(out.get(comm, 0.0) + (int(fields[11]) + int(fields[12])) / tick, 2)
    return out


KERNEL_FIELDS = ("Slab", "Percpu", "KernelStack", "PageTables")


def kernel_mb() -> float:
    """The kernel's own memory (/proc/meminfo: slab, per-CPU, stacks, page tables), in MB:
    where namespaces, veths, sockets and routes live."""
    with open("/proc/meminfo") as f:
        rows = dict(line.split(":", 1) for line in f)
    return sum(int(rows[k].split()[0]) for k in KERNEL_FIELDS) / 1024


def pss_mb(name: str) -> float:
    """Proportional set size of every process of lab `name` (shared pages split among their
    users, unlike RSS), in MB."""
    kib = 0
    for pid, tag in procs.tagged_processes().items():
        if tag != name:
            continue
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                kib += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except (OSError, StopIteration):  # gone meanwhile
            continue
    return kib / 1024


def lab_memory_mb(name: str, kernel_before: float) -> int:
    """What lab `name` holds: its processes' PSS and what the kernel grew by since
    `kernel_before`. Less disturbed than MemAvailable by other labs on the machine (a
    guest or engine of theirs allocating meanwhile), though their namespaces count too."""
    return round(pss_mb(name) + kernel_mb() - kernel_before)


def one(key: str, shape: dict[str, Any], baseline: bool = False) -> dict[str, Any]:
    name = f"{PREFIX}scale-{key}"
    topo = {"name": name} | shape
    plan = lab.load_topology(topo)[1]
    est = estimate.estimate(plan)
    before, load, kernel0 = estimate.available_mb(), os.getloadavg()[0], kernel_mb()
    cpu0 = time.process_time()
    try:
        result = lab.up(topo, timeout_s=TIMEOUT_S)
        taken = before - estimate.available_mb()
        used = lab_memory_mb(name, kernel0)
        row = {"frr_rss_mb": router_rss_mb(name), "frr_cpu_s": frr_cpu_s(name),
               "rocelab_cpu_s": round(time.process_time() - cpu0, 2)}
        row |= fib_read_baseline(plan) if baseline else {}
    finally:
        t, held = time.monotonic(), estimate.available_mb()
        lab.down(name)
        down_s = time.monotonic() - t
    freed = estimate.available_mb() - held  # (the kernel frees a namespace's memory later)
    return {"routers": len(plan.routers), "hosts": len(plan.hosts), "namespaces": len(plan.nodes),
            "links": len(plan.links), "prefixes": len(plan.fib_targets()),
            "bgp_sessions": est.bgp_sessions, "bgp_paths": estimate.bgp_paths(plan),
            "converged_s": result.timings["total_s"], "timings": result.timings,
            "memory_mb": used, "memory_taken_mb": taken, "memory_freed_mb": freed,
            "estimate_mb": est.memory_mb, "estimate_error": round(est.memory_mb / max(used, 1) - 1, 3),
            "down_s": round(down_s, 2), "load_average_1m": round(load, 2), **row}


def verdict(fabrics: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The top of the curve against TARGET, and the estimate's error at every size (pure)."""
    top = max(fabrics.values(), key=lambda r: r["routers"])
    worst = max(abs(r["estimate_error"]) for r in fabrics.values())
    return {"target": TARGET, "worst_estimate_error": worst,
            "meets_target": (top["routers"] >= TARGET["routers_min"]
                             and top["hosts"] >= TARGET["hosts_min"]
                             and top["converged_s"] <= TARGET["converged_s_max"]
                             and top["memory_mb"] <= TARGET["memory_mb_max"]
                             and worst <= TARGET["estimate_error_max"])}


def run(repeats: int = 1, log=lambda m: print(m, file=sys.stderr)) -> dict[str, Any]:
    """One run per fabric (the top is minutes of both cores): `repeats` is not used here."""
    del repeats
    out: dict[str, Any] = {"fabrics": {}}
    for key, shape in FABRICS.items():
        row = out["fabrics"][key] = one(key, shape)
        log(f"scale {key}: {row['routers']} routers, {row['hosts']} hosts converged in "
            f"{row['converged_s']:.1f} s, {row['memory_mb']} MB (estimate {row['estimate_mb']} "
            f"MB), load {row['load_average_1m']}")
    key, shape = BASELINE
    base = out["baseline"] = one(key, shape, baseline=True)
    log(f"scale baseline {key}: converged in {base['converged_s']:.1f} s, {base['memory_mb']} MB")
    same = out["fabrics"]["r132"]
    out["r132_vs_per_host"] = {k: round(same[k] / max(base[k], 1e-9), 2)
                               for k in ("converged_s", "memory_mb")}
    return out | verdict(out["fabrics"])
