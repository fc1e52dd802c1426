"""Lossless-class rules: a PFC pause storm (where it started, how it spread, whom it
blocked) and packets dropped in the lossless class anyway."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from ...metrics.snapshot import PortSample
from ..evidence import Evidence
from .common import (
    ROCE_TC,
    Finding,
    Severity,
    active,
    affected,
    first_rise,
    flow_hops,
    item,
    names,
    tc3_ports,
)

SIGNIFICANT_PAUSE_S = 0.5  # an egress paused this long (wall) stalls the flows through it
NEVER = float("inf")  # a port whose pause series never rose (the pause time is unknown)

Pauser = tuple[float, int, PortSample]  # (first pause, -frames, port): who paused first


@dataclass(frozen=True)
class Origin:
    """Where a pause storm started (`node`:`port`, the port `port` leads to) and why."""

    t: float  # when it first paused (NEVER: unknown)
    node: str
    port: str
    why: str
    root: bool  # a root cause itself (a host that stopped draining), not a symptom
    score: float
    fix: str


def pause_storm(ev: Evidence) -> list[Finding]:
    pausers = _pausers(ev)
    if not pausers:
        return []
    o = _origin(ev, pausers)
    key = f"{o.node}:{o.port}"
    paused = {k: v for k, v in ev.paused_s.items() if v > 0}
    victims = _victims(ev, o, paused)
    sev, why = _severity(ev, o, sum(p["pause_tx"] for _, _, p in pausers),
                         max(paused.values(), default=0.0), bool(victims))
    cause = f"pause storm from {key}: {why}"
    if victims:
        cause += (f"; head-of-line blocked {len(victims)} flow(s) that do not use "
                  f"{key}: {', '.join(names(victims))}")
    into = [f for f in active(ev.flows, o.t, NEVER) if f["dst"] == o.port]
    return [Finding("pause-storm", sev, cause, _evidence(ev, pausers, paused),
                    affected(victims + into), o.fix, o.score + (0.1 if victims else 0.0),
                    [o.node, key] + [f"{q['node']}:{q['port']}" for _, _, q in pausers])]


def _pausers(ev: Evidence) -> list[Pauser]:
    """Every port that sent PFC frames, the first to pause first."""
    pausers = []
    for p in ev.ports:
        if p["pause_tx"] > 0:
            t = first_rise(p["series"]["pause_tx"])
            pausers.append((t if t is not None else NEVER, -p["pause_tx"], p))
    return sorted(pausers, key=lambda x: (x[0], x[1], x[2]["node"], x[2]["port"]))


def _origin(ev: Evidence, pausers: list[Pauser]) -> Origin:
    """A host that paused is the origin (it stopped draining); else the first switch."""
    by_host = [x for x in pausers if ev.kind(x[2]["node"]) == "host"]
    if by_host:
        t, _, p = by_host[0]
        host = p["node"]
        leaf = ev.leaf_of(host) or "its leaf"
        why = (f"{host} stopped draining: its NIC sent {p['pause_tx']} PFC frames to {leaf}"
               + (f" (first at {t:.2f} s)" if t != NEVER else ""))
        return Origin(t, leaf, ev.port_towards(leaf, host) or host, why, True, 2.2,
                      f"find why {host} stopped draining its receive queue (a stalled consumer, "
                      "a full completion queue, a hung process); PFC watchdog on the switches "
                      "would cap how long one host can pause the fabric")
    t, _, p = pausers[0]
    node = p["node"]
    hot = max((q for q in tc3_ports(ev) if q["node"] == node),
              key=lambda q: q["max_queued"], default=None)
    port = hot["port"] if hot else "?"
    into = [f for f in active(ev.flows, t, t) if port in (f["dst"], ev.leaf_of(f["dst"]))]
    if len(into) >= 2:
        why = (f"an incast: {len(into)} flows into {port} met at {node}:{port} and {node} "
               f"paused its upstreams from {t:.2f} s")
    else:
        why = f"{node}:{port} congested and {node} paused its upstreams from {t:.2f} s"
    return Origin(t, node, port, why, False, 1.0,
                  "keep ECN/DCQCN reacting before PFC does: check ECN marking on "
                  f"{node} (Kmin below XOFF) and DCQCN on the senders; spread the incast")


def _victims(ev: Evidence, o: Origin, paused: dict[str, float]) -> list[dict]:
    """Flows (path known) that waited at a long-paused egress without using the origin."""
    key = f"{o.node}:{o.port}"
    return [f for f in active(ev.flows, o.t, NEVER)
            if f["dst"] != o.port and f.get("spines")
            and any(paused.get(f"{h}:{ROCE_TC}", 0) >= SIGNIFICANT_PAUSE_S
                    for h in flow_hops(ev, f))
            and key not in flow_hops(ev, f)]


def _severity(ev: Evidence, o: Origin, frames: int, worst: float, victims: bool
              ) -> tuple[Severity, str]:
    """Brief pauses that blocked nobody are info; a storm with victims, a host origin or
    an egress paused over a fifth of the window is critical."""
    if ev.window_s and worst < 0.02 * ev.window_s and not victims and not o.root:
        return Severity.INFO, f"brief PFC pauses ({frames} frames, at most {worst:.2f} s paused): {o.why}"
    critical = victims or o.root or worst > 0.2 * ev.window_s
    return (Severity.CRITICAL if critical else Severity.WARNING), o.why


def _evidence(ev: Evidence, pausers: list[Pauser], paused: dict[str, float]) -> list[dict]:
    """The first 12 pausing ports in order (whom each paused), the 6 longest-paused egresses."""
    spread = [item("pause_tx_frames", q["pause_tx"], q["node"], q["port"], ROCE_TC,
                   at_s=None if t == NEVER else t,
                   to=(ev.peer(q["node"], q["port"]) or ("?", "?"))[0])
              for t, _, q in pausers[:12]]
    longest = sorted(paused.items(), key=lambda kv: -kv[1])[:6]
    return spread + [item("paused_seconds", v, k.split(":")[0], k.split(":")[1],
                          int(k.split(":")[2])) for k, v in longest]


def lossless_drops(ev: Evidence) -> list[Finding]:
    out = []
    sent: dict[str, int] = defaultdict(int)  # PFC frames each node sent (counted under TC 0)
    for p in ev.ports:
        sent[p["node"]] += p["pause_tx"]
    for labels, drops in sorted(ev.metric("rocelab_qdisc_class_dropped_packets_total").items()):
        d = dict(labels)
        if d.get("tc") != str(ROCE_TC) or drops <= 0:
            continue
        node, port = d["node"], d["port"]
        peer = ev.peer(node, port)
        if sent[node] == 0:
            why = (f"{node} never paused its senders (0 PFC frames sent): PFC is off on "
                   f"{node} or on TC {ROCE_TC}")
            fix = f"enable PFC on TC {ROCE_TC} on {node} (and the hosts' NICs)"
        else:
            why = (f"PFC paused too late ({sent[node]} PFC frames sent): the buffer above "
                   "XOFF did not hold what was still arriving")
            fix = (f"lower XOFF or add headroom on {node} (headroom >= 2 x link delay x "
                   "rate + MTU)")
        hurt = [f for f in ev.flows if f"{node}:{port}" in flow_hops(ev, f)]
        out.append(Finding("lossless-drops", Severity.CRITICAL,
                           f"{int(drops)} packets dropped in the lossless class at {node}:{port}"
                           f"{' toward ' + peer[0] if peer else ''}: {why}",
                           [item("qdisc_class_dropped_packets", drops, node, port, ROCE_TC)],
                           affected(hurt), fix,
                           2.8 + min(0.19, math.log10(drops) / 100), [node, f"{node}:{port}"]))
    return out
