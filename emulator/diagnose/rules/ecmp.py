"""Path rules: flows that ECMP hashed onto one spine (a collision), and a congested
spine on a prefill -> decode path."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from statistics import median
from typing import Any

from ...metrics.snapshot import PortSample
from ..evidence import Evidence
from .common import (
    ROCE_TC,
    Finding,
    Severity,
    above_kmin,
    affected,
    flow_hops,
    item,
    latency,
    names,
    tc3_ports,
)

MIN_ABOVE_KMIN_S = 1.0  # a spine queue above Kmin this long (wall) while traffic enters it


# -- ECMP collision / polarization ---------------------------------------------------


@dataclass(frozen=True)
class Hot:
    """The spine that sent the most toward a leaf, congested, while others sent little."""

    leaf: str
    spine: str
    port: str  # the spine's port to the leaf
    bytes: float
    stats: PortSample  # that port's TC 3
    cold: dict[str, tuple[str, float]]  # spines that sent under 10 % of it: (port, bytes)


def ecmp_collision(ev: Evidence) -> list[Finding]:
    tx = ev.by_port("rocelab_interface_tx_bytes_total")
    stats = {(p["node"], p["port"]): p for p in tc3_ports(ev)}
    spines = sorted(n for n, k in ev.kinds.items() if k == "spine")
    out = []
    for leaf in sorted(n for n, k in ev.kinds.items() if k == "leaf"):
        hot = _hot_spine(ev, leaf, spines, tx, stats)
        if hot is None:
            continue
        crossing = [f for f in ev.flows if ev.leaf_of(f["dst"]) == leaf
                    and hot.spine in (f.get("spines") or [])]
        if len(crossing) < 2 and ev.flows:
            continue  # one flow on one spine: congestion, not a collision
        if not ev.flows and above_kmin(ev, hot.stats).seconds < MIN_ABOVE_KMIN_S:
            continue  # live, flows unknown: one flow's first burst marks too; want a standing queue
        out.append(_collision(ev, hot, crossing, spines))
    return out


def _hot_spine(ev: Evidence, leaf: str, spines: list[str], tx: dict[str, float],
               stats: dict[tuple[str, str], PortSample]) -> Hot | None:
    down: dict[str, tuple[str, float, PortSample | None]] = {}
    for spine in spines:
        port = ev.port_towards(spine, leaf)
        if port:
            down[spine] = (port, tx.get(f"{spine}:{port}", 0.0), stats.get((spine, port)))
    if len(down) < 2:
        return None
    spine = max(down, key=lambda s: down[s][1])
    port, hot_bytes, st = down[spine]
    if st is None:
        return None
    kmin = ev.thresholds.get("kmin", 0)
    congested = st["ce_marked"] > 0 or (kmin and st["max_queued"] > kmin)
    cold = {s: (p, b) for s, (p, b, _) in down.items() if s != spine and b < 0.1 * hot_bytes}
    if not congested or not cold or hot_bytes < 1 << 20:
        return None
    return Hot(leaf, spine, port, hot_bytes, st, cold)


def _collision(ev: Evidence, hot: Hot, crossing: list[dict[str, Any]], spines: list[str]
               ) -> Finding:
    st, spine, port = hot.stats, hot.spine, hot.port
    sports = sorted({q["udp_sport"] for f in crossing for q in f.get("qps", [])
                     if q.get("spine") == spine and q.get("udp_sport")})
    per_spine: dict[str, int] = defaultdict(int)
    for f in ev.flows:
        if ev.leaf_of(f["dst"]) == hot.leaf:
            for s in f.get("spines") or []:
                per_spine[s] += 1
    evidence = [item("tx_bytes", hot.bytes, spine, port),
                *[item("tx_bytes", b, s, p) for s, (p, b) in sorted(hot.cold.items())],
                item("ce_marked_packets", st["ce_marked"], spine, port, ROCE_TC),
                item("max_queued_bytes", st["max_queued"], spine, port, ROCE_TC)]
    if sports:
        evidence.append(item("udp_source_ports", len(sports), spine, sports=sports))
    share = ", ".join(f"{s} {per_spine.get(s, 0)}" for s in spines)
    cause = (f"ECMP collision toward {hot.leaf}: " +
             (f"{len(crossing)} flows ({', '.join(names(crossing))}) hashed onto "
              if crossing else "the traffic hashed onto ") +
             f"{spine} ({spine}:{port} queued {st['max_queued']} B and "
             f"marked {st['ce_marked']}) while {', '.join(sorted(hot.cold))} carried "
             f"{int(max(b for _, b in hot.cold.values()))} B"
             + (f"; flows per spine: {share}" if ev.flows else ""))
    return Finding("ecmp-collision", Severity.WARNING, cause, evidence, affected(crossing),
                   "spread the flows: more QPs per transfer (more UDP source ports), "
                   "hash on L4 (ecmp_hash: l4) with per-QP source ports, or "
                   "flowlet/adaptive routing on the leaves",
                   1.2, [spine, f"{spine}:{port}", hot.leaf])


# -- congested spine on a prefill->decode path ---------------------------------------


def congested_spine(ev: Evidence, skip: set[str] | None = None) -> list[Finding]:
    kmin = ev.thresholds.get("kmin", 0)
    out = []
    for p in tc3_ports(ev):
        if ev.kind(p["node"]) != "spine" or f"{p['node']}:{p['port']}" in (skip or set()):
            continue
        a = above_kmin(ev, p)
        if not (kmin and p["max_queued"] > kmin and a.seconds >= MIN_ABOVE_KMIN_S / 2):
            continue
        out.append(_congested(ev, p, a.seconds, a.first_s))
    return out


def _congested(ev: Evidence, p: PortSample, above: float, first: float | None) -> Finding:
    hop = f"{p['node']}:{p['port']}"
    crossing = [f for f in ev.flows if hop in flow_hops(ev, f)]
    lat_c, lat_a = _latencies(crossing, [f for f in ev.flows if f not in crossing])
    slower = median(lat_c) / median(lat_a) if lat_c and lat_a and median(lat_a) > 0 else None
    sev = Severity.WARNING if slower is not None and slower >= 1.5 else Severity.INFO
    evidence = [item("queued_above_kmin_seconds", above, p["node"], p["port"], ROCE_TC,
                     at_s=first, max_queued=p["max_queued"]),
                item("ce_marked_packets", p["ce_marked"], p["node"], p["port"], ROCE_TC)]
    if slower is not None:
        evidence.append(item("latency_ratio_crossing_vs_avoiding", slower,
                             crossing_p99=max(lat_c), avoiding_p99=max(lat_a)))
    cause = (f"{p['node']} is congested toward {p['port']}: queue above Kmin for "
             f"{above:.1f} s (peak {p['max_queued']} B)")
    if crossing:
        cause += f"; {len(crossing)} flow(s) cross it: {', '.join(names(crossing))}"
    if slower is not None:
        cause += f", {slower:.1f}x the latency of flows that avoid it"
    return Finding("congested-spine", sev, cause, evidence, affected(crossing),
                   f"move decode placement or pin flows away from {p['node']}; add "
                   "spine capacity or QPs so ECMP spreads the load",
                   0.8, [p["node"], hop])


def _latencies(crossing: list[dict[str, Any]], avoiding: list[dict[str, Any]]
               ) -> tuple[list[float], list[float]]:
    """The latencies of the flows crossing a port and of those avoiding it, like with
    like: KV handoffs only when both sides have some."""
    if any(f.get("handoff_p99_s") for f in crossing) and \
            any(f.get("handoff_p99_s") for f in avoiding):
        crossing = [f for f in crossing if f.get("handoff_p99_s")]
        avoiding = [f for f in avoiding if f.get("handoff_p99_s")]
    return ([v for f in crossing if (v := latency(f)) is not None],
            [v for f in avoiding if (v := latency(f)) is not None])
