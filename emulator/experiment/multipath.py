"""RC against MRC on one fabric (pure): where each flow's bytes went, what it resent,
whether it failed, how much the load or a fault slowed it.

    path_bytes     per flow and in the summary: payload bytes per spine, from the
                   transport's own view (an RC QP's spine, the spine each MRC EV hashes to)
    path_jain      Jain's index of the spines' path bytes (1.0: every spine equal)
    path_spread    (max - min) / mean of the spines' path bytes (0.05: within 5 %)
    spine_spread, spine_jain  the same from the spines' own port counters (every byte they
                   sent, resends and ACKs included)
    bisection_bps  the cut the flows cross: the least of their sources' and destinations'
                   host links and their leaves' uplinks, at the shaped rate (wall)
    longest_interruption_s  the engine's longest gap in placed-byte progress (fine
                   grained); a failed flow: its sampled interruption, which runs to the failure
    slowdown       a flow's FCT over that of its `unloaded` flow

docs/mrc.md ("The measured comparisons") and docs/cli.md list the keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

from ..plan import Kind, Plan
from ..stats import jain

MRC_SUM_KEYS = ("retirements", "probes_sent", "probes_answered", "sacks_sent", "sacks_received",
                "nacks_sent", "nacks_received", "trim_nacks_sent", "trim_nacks_received",
                "retransmitted_packets", "retransmitted_bytes")
UNKNOWN = "unknown"  # a path whose spine was not resolved


class FlowTransport(TypedDict, total=False):
    """A flow's transport numbers in results.json (beside analysis.FlowSummary's)."""

    transport: str  # "rc" | "mrc"
    failed: bool  # the request did not complete (a transfer failed)
    may_fail: bool  # present (true) when the flow allows it: the verdict does not count it
    retransmitted_bytes: int
    path_bytes: dict[str, int]
    longest_interruption_s: float | None
    slowdown: float | None  # fct_s over the `unloaded` flow's fct_s
    mrc: dict[str, Any] | None  # the MRC connection's stats (engine contract), folded


class PathSummary(TypedDict, total=False):
    """The comparison's numbers in results.json's `summary`."""

    path_bytes: dict[str, int]
    path_jain: float | None
    path_spread: float | None
    spine_spread: float | None  # the same from the switches' own counters (traffic.spine_bytes)
    spine_jain: float | None
    bisection_bps: float | None
    goodput_vs_bisection: float | None
    failed_flows: int
    retransmitted_bytes: int
    longest_interruption_s: float | None


def fold_mrc(blocks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several transfers' MRC stats as one: counters summed, paths merged by (ev, plane,
    spine) with their bytes summed, the EV states as the last transfer ended."""
    out: dict[str, Any] = {k: sum(int(b.get(k) or 0) for b in blocks) for k in MRC_SUM_KEYS}
    out["evs_total"] = max(int(b.get("evs_total") or 0) for b in blocks)
    out["evs_by_state"] = dict(blocks[-1].get("evs_by_state") or {})
    paths: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
    for b in blocks:
        for p in b.get("paths") or []:
            key = (p.get("ev"), p.get("plane"), p.get("spine"))
            got = paths.setdefault(key, {"ev": key[0], "plane": key[1], "spine": key[2],
                                         "state": p.get("state"), "bytes": 0, "packets": 0,
                                         "retirements": 0})
            got["state"] = p.get("state")
            for k in ("bytes", "packets", "retirements"):
                got[k] += int(p.get(k) or 0)
    out["paths"] = list(paths.values())
    return out


def fold_transport(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Repeated transfers' transport numbers as one result's: the longest interruption,
    retransmitted bytes summed, MRC stats folded."""
    out: dict[str, Any] = {}
    gaps = [r["longest_interruption_s"] for r in results
            if r.get("longest_interruption_s") is not None]
    if gaps:
        out["longest_interruption_s"] = max(gaps)
    if any("retransmitted_bytes" in r for r in results):
        out["retransmitted_bytes"] = sum(int(r.get("retransmitted_bytes") or 0) for r in results)
    blocks = [r["mrc"] for r in results if isinstance(r.get("mrc"), dict)]
    if blocks:
        out["mrc"] = fold_mrc(blocks)
    return out


def qp_bytes(lengths: Sequence[int], qps: int) -> list[int]:
    """Each QP's payload bytes: the engine stripes message i onto QP i mod qps."""
    return [sum(lengths[i::qps]) for i in range(qps)]


def path_bytes(result: Mapping[str, Any], per_qp: Sequence[int]) -> dict[str, int]:
    """spine -> payload bytes of one flow: an MRC connection's paths by the spine each EV
    hashes to; RC QPs by their spine, each QP's share of the messages (`per_qp`, for one
    transfer: repeated transfers list their QPs in turn)."""
    out: dict[str, int] = {}
    mrc = result.get("mrc")
    if isinstance(mrc, dict):
        for p in mrc.get("paths") or []:
            key = p.get("spine") or UNKNOWN
            out[key] = out.get(key, 0) + int(p.get("bytes") or 0)
        return out
    for i, q in enumerate(result.get("qps") or []):
        if per_qp:
            key = q.get("spine") or UNKNOWN
            out[key] = out.get(key, 0) + per_qp[i % len(per_qp)]
    return out


def flow_numbers(transport: str, result: Mapping[str, Any] | None, error: str | None,
                 per_qp: Sequence[int], mtu: int, sampled_gap_s: float | None) -> FlowTransport:
    """A flow's transport numbers from its (folded) engine result; None: it failed."""
    r = result or {}
    mrc = r.get("mrc") if isinstance(r.get("mrc"), dict) else None
    if mrc is not None:
        resent = int(mrc.get("retransmitted_bytes") or 0)
    elif "retransmitted_bytes" in r:
        resent = int(r["retransmitted_bytes"])
    else:  # RC resends whole packets: at most an MTU each
        resent = int(r.get("retransmitted_packets") or 0) * mtu
    gap = r.get("longest_interruption_s", r.get("interruption_s"))
    if result is None:  # failed: the outage ran at least until the request failed
        gap = sampled_gap_s
    return {"transport": transport, "failed": error is not None, "retransmitted_bytes": resent,
            "path_bytes": path_bytes(r, per_qp) if result is not None else {},
            "longest_interruption_s": round(float(gap), 6) if gap is not None else None,
            "slowdown": None, "mrc": mrc}


def add_slowdowns(flows: Sequence[dict[str, Any]], unloaded: Mapping[str, str | None]) -> None:
    """Each flow with an `unloaded` flow: its FCT over that flow's (None if either failed)."""
    fct = {f["name"]: f.get("fct_s") for f in flows}
    for f in flows:
        ref = unloaded.get(f["name"])
        if ref and fct.get(ref) and f.get("fct_s"):
            f["slowdown"] = round(f["fct_s"] / fct[ref], 4)


def spread(values: Sequence[float]) -> float | None:
    """(max - min) / mean; None without load."""
    mean = sum(values) / len(values) if values else 0.0
    return round((max(values) - min(values)) / mean, 4) if mean > 0 else None


def bisection_bps(plan: Plan, endpoints: Iterable[tuple[str, str]]) -> float | None:
    """The least capacity the flows must cross (wall, shaped rate): their sources' host
    links, their leaves' uplinks, the destinations' leaves' uplinks and host links.
    None on an unshaped lab (its rate is whatever the CPUs manage)."""
    cp = plan.congestion
    pairs = list(endpoints)
    if cp is None or not pairs:
        return None
    cuts = [_edge(plan, {s for s, _ in pairs}), _edge(plan, {d for _, d in pairs})]
    caps = [sum(cp.rate_of(link.speed_bps or plan.speed_bps) for link in cut)
            for side in cuts for cut in side]
    return float(min(caps)) if caps else None


def _edge(plan: Plan, hosts: set[str]) -> tuple[list[Any], list[Any]]:
    """The host links of `hosts` and the uplinks (to anything but a host) of their leaves."""
    host_links = [lk for lk in plan.links if lk.a in hosts or lk.b in hosts]
    leaves = {n for lk in host_links for n in (lk.a, lk.b) if n not in hosts}
    is_host = {h.name for h in plan.hosts}
    uplinks = [lk for lk in plan.links if (lk.a in leaves and lk.b not in is_host)
               or (lk.b in leaves and lk.a not in is_host)]
    return host_links, uplinks


def summary(plan: Plan, flows: Sequence[Mapping[str, Any]], goodput_bps: float | None,
            spine_bytes: Mapping[str, int] | None = None) -> PathSummary:
    """The comparison's numbers over every flow (results.json's `summary`); `spine_bytes`:
    what each spine sent by its own port counters (traffic.spine_bytes), when recorded."""
    spines = [s.name for s in plan.of_kind(Kind.SPINE)]
    total: dict[str, int] = dict.fromkeys(spines, 0)
    for f in flows:
        for spine, b in (f.get("path_bytes") or {}).items():
            total[spine] = total.get(spine, 0) + b
    loads = [float(total[s]) for s in spines]
    cut = bisection_bps(plan, [(f["src"], f["dst"]) for f in flows])
    gaps = [g for f in flows if (g := f.get("longest_interruption_s")) is not None]
    switch = [float(v) for v in (spine_bytes or {}).values()]
    return {"spine_spread": spread(switch), "spine_jain": round(jain(switch), 4) if any(switch)
            else None,
            "path_bytes": total,
            "path_jain": round(jain(loads), 4) if any(loads) else None,
            "path_spread": spread(loads),
            "bisection_bps": cut,
            "goodput_vs_bisection": round(goodput_bps / cut, 4) if cut and goodput_bps else None,
            "failed_flows": sum(1 for f in flows if f.get("failed")),
            "retransmitted_bytes": sum(int(f.get("retransmitted_bytes") or 0) for f in flows),
            "longest_interruption_s": max(gaps) if gaps else None}
