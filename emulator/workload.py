"""Workloads over a running lab: one transfer, or KV-cache handoffs between many pairs.

Library side of `rocelab transfer` and `rocelab kv`: it resolves hosts,
starts engines, runs transfers (concurrently where asked) and summarises
them. Results are plain dicts with stable keys (documented in docs/roce.md).
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .engine.job import Job, TransferResult
from .errors import NodeNotFoundError, RocelabError, TooLongError
from .hosts import ensure, for_pair, kind_of
from .plan import Kind, Node, Plan
from .spec import Role
from .stats import p50_p99

Progress = Callable[[int, int], None]  # (bytes done, bytes total)
SUM_KEYS = ("retransmitted_packets", "naks_rx", "naks_tx", "timeouts", "bad_icrc", "access_errors")


def host(plan: Plan, name: str, role: Role | None = None, option: str = "--src",
         rxe_ok: bool = False) -> Node:
    """The host `name`; a host of a kind whose bytes rocelab's engine does not move (rxe)
    only where the caller can drive one (`rxe_ok`: transfer and kv, through its kind)."""
    try:
        node = plan.node(name)
    except KeyError:
        names = ", ".join(h.name for h in plan.hosts)
        raise NodeNotFoundError(f"{option}: no host {name!r} in lab {plan.lab}; hosts: {names}") from None
    if node.kind is not Kind.HOST:
        raise RocelabError(f"{option}: {name} is a {node.kind.value}, not a host")
    if not rxe_ok:
        require_engine(plan, node, option)
    return node


def require_engine(plan: Plan, node: Node, option: str) -> None:
    kind = kind_of(node)
    if not kind.engine:
        raise RocelabError(f"{option}: {kind.why_not_engine(plan, node)}")


def default_pairs(plan: Plan) -> list[tuple[Node, Node]]:
    prefill = [h for h in plan.hosts if h.role == Role.PREFILL.value]
    decode = [h for h in plan.hosts if h.role == Role.DECODE.value]
    if not prefill or not decode:
        raise RocelabError(f"lab {plan.lab} needs prefill and decode hosts for KV transfers")
    return list(zip(prefill, decode))


def parse_pairs(plan: Plan, text: str | None) -> list[tuple[Node, Node]]:
    if not text:
        return default_pairs(plan)
    pairs = []
    for item in text.split(","):
        src, sep, dst = item.partition(":")
        if not sep:
            raise RocelabError(f"--pairs: {item!r} is not SRC:DST (e.g. prefill1:decode1)")
        pairs.append((host(plan, src.strip(), option="--pairs", rxe_ok=True),
                      host(plan, dst.strip(), option="--pairs", rxe_ok=True)))
    return pairs


def fastest_wall_bps(plan: Plan, job: Job, src: Node) -> float | None:
    """The fastest `job` could move from `src` (wall bit/s): its rate limit, and on a shaped
    lab every NIC of `src` at its shaped line rate. None: nothing bounds it (an unshaped
    lab runs as fast as the CPU)."""
    rates = [job.rate_bps] if job.rate_bps else []
    if plan.congestion:
        rates.append(sum(plan.congestion.rate_of(i.speed_bps) for i in src.interfaces))
    return min(rates) if rates else None


def check_duration(plan: Plan, job: Job, src: Node, bound: str = "--max-duration") -> None:
    """TooLongError if `job` cannot finish within its timeout (`bound`: what sets it), before
    anything moves: `--rate 1K` would otherwise run for days, or fail at the timeout."""
    bps = fastest_wall_bps(plan, job, src)
    least_s = job.payload_bytes * 8 / bps if bps else 0.0
    if least_s <= job.timeout_s:
        return
    dilated = f" under dilation {plan.dilation:g}" if plan.congestion else ""
    raise TooLongError(f"{job.payload_bytes} bytes from {src.name} at {bps:.4g} bit/s (wall"
                       f"{dilated}) take at least {human_s(least_s)}, more than {bound} "
                       f"{human_s(job.timeout_s)}: raise {bound} or the rate, or move fewer "
                       "bytes")


def human_s(seconds: float) -> str:
    """600 -> '10 min', 536871 -> '6.2 days'."""
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def run_transfer(plan: Plan, src: Node, dst: Node, job: Job,
                 progress: Progress | None = None) -> TransferResult:
    """One transfer, moved by the pair's kind (an rxe end: kvpeer in its guest).
    TooLongError before it starts if it could not finish within job.timeout_s."""
    check_duration(plan, job, src)
    check_transport(plan, job, [src, dst])
    ensure(plan, [src, dst])
    return _move(plan, src, dst, job, progress)


def check_transport(plan: Plan, job: Job, hosts: list[Node]) -> None:
    """MRC runs in rocelab's engine only: a host of another kind (rxe) cannot take part."""
    if job.transport != "mrc":
        return
    for h in hosts:
        require_engine(plan, h, "--transport mrc")


def _move(plan: Plan, src: Node, dst: Node, job: Job,
          progress: Progress | None) -> TransferResult:
    """The transfer itself, both ends ready: by the kind that moves the pair."""
    return for_pair(src, dst).transfer(plan, src, dst, job, progress)


def run_kv(plan: Plan, pairs: list[tuple[Node, Node]], job: Job, requests: int,
           concurrency: int, progress: Progress | None = None) -> dict[str, Any]:
    """`requests` KV handoffs round-robin over `pairs`, `concurrency` at a time."""
    if requests < 1 or concurrency < 1:
        raise RocelabError("--requests and --concurrency must be at least 1")
    for src, dst in pairs:  # each handoff has the whole timeout: none may be bound to exceed it
        check_duration(plan, job, src)
        check_transport(plan, job, [src, dst])
    hosts = sorted({h for p in pairs for h in p}, key=lambda n: n.name)
    ensure(plan, hosts)
    # a host of a serial kind runs one transfer at a time (an rxe guest: one kvpeer owns
    # its 18515, and its counters are the device's)
    busy = {h.name: threading.Lock() for h in hosts if kind_of(h).serial}
    done: dict[int, int] = {}
    lock = threading.Lock()
    total = requests * job.payload_bytes

    def one(i: int) -> dict[str, Any]:
        src, dst = pairs[i % len(pairs)]

        def tick(b: int, _t: int, _sent: int = 0) -> None:
            with lock:
                done[i] = b
                if progress:
                    progress(sum(done.values()), total)

        locks = [busy[h.name] for h in sorted({src, dst}, key=lambda n: n.name) if h.name in busy]
        with contextlib.ExitStack() as held:
            for host_lock in locks:  # in name order: no two requests wait on each other
                held.enter_context(host_lock)
            res = _move(plan, src, dst, job, tick)
        tick(job.payload_bytes, 0)
        return res | {"request": i}

    t0 = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(one, range(requests)))
    wall = time.monotonic() - t0
    return {"requests": results, "aggregate": summarize(results, wall)}


def summarize(results: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    handoffs = [r["handoff_s"] for r in results]
    total_bytes = sum(r["bytes"] for r in results)
    spines = Counter(q["spine"] for r in results for q in r["qps"])
    p50, p99 = p50_p99(handoffs, 6)
    return {
        "transfers": len(results), "bytes": total_bytes, "wall_s": round(wall_s, 6),
        "goodput_gbps": round(total_bytes * 8 / max(wall_s, 1e-9) / 1e9, 4),
        "handoff_p50_s": p50, "handoff_p99_s": p99,
        "handoff_max_s": round(max(handoffs), 6),
        "handoff_mean_s": round(statistics.fmean(handoffs), 6),
        "integrity_ok": all(r["integrity_ok"] for r in results),
        "qps_per_spine": dict(sorted(spines.items())),
        "longest_interruption_s": max(r.get("longest_interruption_s", 0.0) for r in results),
        "failed": sum(1 for r in results if r.get("failed")),
        **{k: sum(r[k] for r in results) for k in SUM_KEYS},
    }
