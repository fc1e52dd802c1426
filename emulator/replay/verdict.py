"""A replay's verdict, purely from its per-request rows (docs/workloads.md, "Verdict").

Every time here is real-equivalent (the scheduler's wall times divided by the time
scale). A request's handoff is queueing + transfer: the time from its arrival until a worker
started it (waiting for a free slot), plus its data phase as the engine measured it
(first byte posted to last byte placed). The engine's per-transfer fixed costs around
the data phase -- QP setup, registering the buffers, the integrity digests -- are left
out: a serving stack pays them once per connection and pool, not per request.
It meets the budget when handoff <= budget; attainment is the share that do.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import ExitCode, RocelabError
from ..stats import percentile
from .scaling import Scale
from .scheduler import Record


class AttainmentError(RocelabError):
    """Fewer requests met the budget than the user asked for (--min-attainment)."""

    exit_code = ExitCode.EXPECTATION_FAILED


SLOW = 1.5  # a transfer this many times its line-rate time was slowed by something
MAX_MISSED = 200  # the missed requests the results list (worst first)


def rows(records: Iterable[Record], scale: Scale, nic_bps: dict[str, float]) -> list[dict[str, Any]]:
    """One plain row per request, times real-equivalent; `nic_bps`: each host's real line rate."""
    out = []
    for rec in records:
        p, res = rec.placed, rec.result or {}
        k = scale.time_scale
        late = max(0.0, rec.start_s - rec.due_s)
        data = float(res.get("duration_s", 0.0))
        qps = res.get("qps", [])
        out.append({
            "index": p.request.index, "t_s": round(p.request.t_ms / 1000, 6),
            "prefill": p.prefill, "decode": p.decode,
            "input_tokens": p.request.input_tokens, "blocks": len(p.request.blocks),
            "cached_blocks": p.cached_blocks, "cached_tokens": p.cached_tokens,
            "bytes_real": rec.real_bytes, "bytes": rec.wall_bytes,
            "moved": int(res.get("bytes", 0)),  # what the engine reports it moved
            "lateness_s": round(late / k, 6), "transfer_s": round(data / k, 6),
            "handoff_s": round((late + data) / k, 6),
            "line_rate_s": round(rec.real_bytes * 8 / nic_bps.get(p.prefill, math.inf), 6),
            "start_s": round(rec.start_s / k, 6), "end_s": round(rec.end_s / k, 6),
            "busy_at_start": rec.busy_at_start,
            "spines": sorted({str(q.get("spine")) for q in qps if q.get("spine")}),
            "rails": sorted({int(q["rail"]) for q in qps if q.get("rail") is not None}),
            "retransmitted_packets": int(res.get("retransmitted_packets", 0)),
            "timeouts": int(res.get("timeouts", 0)),
            "error": rec.error, "integrity_ok": bool(res.get("integrity_ok", rec.result is not None
                                                                  or not rec.wall_bytes)),
        })
    return out


def summarize(table: Sequence[dict[str, Any]], budget_s: float, bytes_per_token: int,
              bin_s: float = 1.0) -> dict[str, Any]:
    """The verdict: attainment, tails, the cache, load over time and per path, the misses."""
    handoffs = [r["handoff_s"] for r in table if not r["error"]]
    within = sum(1 for r in table if not r["error"] and r["handoff_s"] <= budget_s)
    missed = [r for r in table if r["error"] or r["handoff_s"] > budget_s]
    crowded = spine_crowding(table)
    return {
        "requests": len(table), "within_budget": within, "budget_s": budget_s,
        "attainment": round(within / len(table), 6) if table else 0.0,
        "failed": sum(1 for r in table if r["error"]),
        "integrity_ok": all(r["integrity_ok"] for r in table if not r["error"]),
        "handoff_p50_s": round(percentile(handoffs, 50), 6),
        "handoff_p99_s": round(percentile(handoffs, 99), 6),
        "handoff_p999_s": round(percentile(handoffs, 99.9), 6),
        "handoff_max_s": round(max(handoffs, default=0.0), 6),
        "cache": cache(table, bytes_per_token),
        "bytes_real": sum(r["bytes_real"] for r in table),
        "bytes_moved": sum(r["moved"] for r in table),
        "load": load_over_time(table, bin_s),
        "spines": share_by(table, "spines"), "rails": share_by(table, "rails"),
        "missed": [{"index": r["index"], "handoff_s": r["handoff_s"], "prefill": r["prefill"],
                    "decode": r["decode"], "bytes_real": r["bytes_real"],
                    "why": why(r, budget_s, crowded)}
                   for r in sorted(missed, key=lambda r: -r["handoff_s"])[:MAX_MISSED]],
        "missed_reasons": dict(Counter(w.split(":")[0] for r in missed
                                       for w in why(r, budget_s, crowded))),
    }


def cache(table: Sequence[dict[str, Any]], bytes_per_token: int) -> dict[str, Any]:
    blocks = sum(r["blocks"] for r in table)
    hit = sum(r["cached_blocks"] for r in table)
    return {"blocks": blocks, "hit_blocks": hit, "hit_ratio": round(hit / blocks, 6) if blocks else 0.0,
            "requests_with_hits": sum(1 for r in table if r["cached_blocks"]),
            "bytes_saved": sum(r["cached_tokens"] for r in table) * bytes_per_token}


def load_over_time(table: Sequence[dict[str, Any]], bin_s: float) -> dict[str, Any]:
    """Offered (bytes at their arrival) and carried (bytes spread over their transfer) Gbit/s,
    real-equivalent, per `bin_s` bin."""
    end = max([r["end_s"] for r in table] + [r["t_s"] for r in table] + [0.0])
    n = max(1, math.ceil(end / bin_s + 1e-9))
    offered, carried = [0.0] * n, [0.0] * n
    for r in table:
        offered[min(n - 1, int(r["t_s"] // bin_s))] += r["bytes_real"]
        a, b = r["end_s"] - r["transfer_s"], r["end_s"]
        for i in range(int(a // bin_s), min(n, int(b // bin_s) + 1)):
            overlap = min(b, (i + 1) * bin_s) - max(a, i * bin_s)
            share = overlap / (b - a) if b > a else float(i == int(b // bin_s))
            carried[min(n - 1, i)] += r["bytes_real"] * max(0.0, share)
    gbps = 8 / bin_s / 1e9
    return {"bin_s": bin_s, "t_s": [round(i * bin_s, 6) for i in range(n)],
            "offered_gbps": [round(v * gbps, 4) for v in offered],
            "carried_gbps": [round(v * gbps, 4) for v in carried]}


def share_by(table: Sequence[dict[str, Any]], key: str) -> dict[str, int]:
    """Real bytes per spine (or rail): each request's bytes split evenly over its paths."""
    out: dict[str, int] = defaultdict(int)
    for r in table:
        for p in r[key]:
            out[str(p)] += r["bytes_real"] // len(r[key])
    return dict(sorted(out.items()))


def spine_crowding(table: Sequence[dict[str, Any]]) -> dict[int, str]:
    """Request index -> its spine, for requests whose spine carried more transfers at once
    than the fabric's spines on average over its transfer (by overlapping count)."""
    spines = sorted({s for r in table for s in r["spines"]})
    if len(spines) < 2:
        return {}
    out = {}
    for r in table:
        if r["error"] or not r["spines"]:
            continue
        a, b = r["end_s"] - r["transfer_s"], r["end_s"]
        on = Counter(s for o in table if o is not r and o["end_s"] - o["transfer_s"] < b
                     and o["end_s"] > a for s in o["spines"])
        mine = max(r["spines"], key=lambda s: on[s])
        if on[mine] > sum(on[s] for s in spines) / len(spines) + 0.5:
            out[r["index"]] = mine
    return out


def why(r: dict[str, Any], budget_s: float, crowded: dict[int, str]) -> list[str]:
    """Why a request missed the budget, each reason one short phrase."""
    if r["error"]:
        return [f"failed: {r['error']}"]
    out = []
    if r["line_rate_s"] > budget_s:
        out.append(f"too big: {r['line_rate_s'] * 1000:.1f} ms at its NIC's line rate alone")
    if r["lateness_s"] > 0.1 * budget_s:
        out.append(f"started late: {r['lateness_s'] * 1000:.1f} ms after its arrival")
    if r["busy_at_start"] and r["transfer_s"] > SLOW * r["line_rate_s"]:
        out.append(f"waited behind others: {r['busy_at_start']} in flight on its hosts")
    if r["index"] in crowded:
        out.append(f"crossed a congested spine: {crowded[r['index']]}")
    if r["retransmitted_packets"] or r["timeouts"]:
        out.append(f"retransmitted: {r['retransmitted_packets']} packets, {r['timeouts']} timeouts")
    return out or [f"slow transfer: {r['transfer_s'] * 1000:.1f} ms for "
                   f"{r['line_rate_s'] * 1000:.1f} ms at line rate"]
