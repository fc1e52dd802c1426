"""The rules: each a pure function of the Evidence, returning Findings (docs/diagnose.md).

A rule reads counters only, never what an experiment injected. Each finding says its
root cause in one sentence, the counters behind it (node, port, TC, value, when), the
flows and hosts it hurt, and what to change. `score` orders findings of one severity:
root causes (a host that stopped draining, ECN off, a dropped lossless frame) above the
symptoms they cause (a pause storm, a congested spine).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from statistics import median
from typing import Any

from .evidence import Evidence

ROCE_TC = 3
ROCE_HEADERS = 20 + 8 + 12 + 4  # IPv4 + UDP + BTH + ICRC: an IP packet of RoCE payload + these
MIN_ABOVE_KMIN_S = 1.0  # a spine queue above Kmin this long (wall) while traffic enters it
MARKS_OWED = 20  # marks RED owed a stretch with none: P(0 | marking on) = e^-20
CLEAN_SHARE = 0.1  # ... and some packets in it arrived unmarked (the CE counts upstream and
# here are sampled 100 ms apart at slightly different times: a small share is noise)
MIN_RATE_SHARE = 0.1  # a DCQCN floor at 10 % of line rate or more, reached: set too high
MIN_CNPS = 5  # CNPs a host must have received before its (lack of) rate cuts mean anything
SIGNIFICANT_PAUSE_S = 0.5  # an egress paused this long (wall) stalls the flows through it
LOSS_MIN_PACKETS = 200  # a link direction must carry this many packets to judge its loss
LOSS_RATIO = 0.002  # 0.2 %: far above what a healthy veth loses (nothing)
LOSS_MIN_LOST = 10  # ... and this many: the two ends are read a few ms apart (in flight)


class Severity(IntEnum):
    INFO = 0
    WARNING = 1
    CRITICAL = 2

    def __str__(self) -> str:
        return self.name.lower()


@dataclass
class Finding:
    kind: str  # pause-storm, ecn-off, dcqcn-off-host, ecmp-collision, congested-spine,
    # routing, gray-link, lossless-drops, mtu-mismatch
    severity: Severity
    cause: str
    evidence: list[dict[str, Any]]
    affected: dict[str, list[str]]  # flows, hosts
    fix: str
    score: float  # orders findings of one severity: most likely root cause first
    where: list[str] = field(default_factory=list)  # nodes and node:ports it speaks of

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "severity": str(self.severity), "cause": self.cause,
                "evidence": self.evidence, "affected": self.affected, "fix": self.fix,
                "score": round(self.score, 3), "where": self.where}


def item(counter: str, value: float, node: str = "", port: str = "", tc: int | None = None,
         at_s: float | None = None, **extra: Any) -> dict[str, Any]:
    """One line of evidence: a counter, where, its value and (if known) when."""
    out: dict[str, Any] = {"counter": counter, "value": _num(value)}
    for k, v in (("node", node), ("port", port), ("tc", tc), ("at_s", at_s)):
        if v not in ("", None):
            out[k] = v
    return out | {k: _num(v) if isinstance(v, float) else v for k, v in extra.items()}


def _num(v: float) -> float | int:
    return int(v) if float(v).is_integer() else round(float(v), 4)


# -- shared views of the evidence ---------------------------------------------


def first_rise(series: Iterable[tuple[float, float]]) -> float | None:
    """When a cumulative series first went above zero."""
    for t, v in series:
        if v > 0:
            return float(t)
    return None


@dataclass(frozen=True)
class AboveKmin:
    """How a port's queue sat above Kmin while traffic entered it (a paused port has no
    arrivals and is not counted), and the marks RED owed it: in its longest stretch without
    a single CE mark, the marks expected from the depth, pmax and the ECN-capable packets
    that arrived not yet marked (a packet marked upstream is never marked again)."""

    seconds: float = 0.0
    marks: int = 0
    first_s: float | None = None
    unmarked_s: float = 0.0  # the stretch without a mark that owed the most marks
    unmarked_from_s: float | None = None
    owed: float = 0.0  # marks RED should have made in that stretch
    clean_share: float = 0.0  # of the ECN-capable packets in it, those not marked upstream


def _mark_probability(ev: Evidence, depth: float) -> float:
    t = ev.thresholds
    kmin, kmax, pmax = t["kmin"], t["kmax"], t.get("pmax_ppm", 200_000) / 1e6
    if depth <= kmin:
        return 0.0
    return 1.0 if depth >= kmax else pmax * (depth - kmin) / (kmax - kmin)


def above_kmin(ev: Evidence, port: dict[str, Any], ce_in: dict[float, float] | None = None
               ) -> AboveKmin:
    """`ce_in`: per sample interval, CE-marked packets that entered the port's node (they
    may all have left through this port: the estimate of unmarked arrivals is low)."""
    kmin = ev.thresholds.get("kmin")
    s = port.get("series", {})
    q, ce, tx = s.get("queued", []), s.get("ce_marked", []), s.get("tx_bytes", [])
    ect = s.get("ecn_capable", [])
    if not kmin or len(q) < 2 or len(ce) != len(q) or len(tx) != len(q):
        return AboveKmin()
    above, marks, first = 0.0, 0, None
    run_s, run_from, run_owed, run_ect, run_clean = 0.0, 0.0, 0.0, 0.0, 0.0
    best: tuple[float, float | None, float, float] = (0.0, None, 0.0, 0.0)
    for i in range(1, len(q)):
        dt = q[i][0] - q[i - 1][0]
        gained = int(ce[i][1] - ce[i - 1][1])
        if q[i - 1][1] > kmin and q[i][1] > kmin and tx[i][1] > tx[i - 1][1]:
            above += dt
            marks += gained
            first = q[i - 1][0] if first is None else first
        if gained == 0 and q[i - 1][1] > kmin and q[i][1] > kmin:
            arrived = (ect[i][1] - ect[i - 1][1]) if len(ect) == len(q) else 0.0
            clean = max(0.0, arrived - (ce_in or {}).get(q[i][0], 0.0))
            if run_s == 0.0:
                run_from = q[i - 1][0]
            run_s += dt
            run_ect += arrived
            run_clean += clean
            run_owed += clean * _mark_probability(ev, (q[i - 1][1] + q[i][1]) / 2)
            if run_owed > best[2]:
                best = (run_s, run_from, run_owed, run_clean / run_ect if run_ect else 0.0)
        else:
            run_s, run_owed, run_ect, run_clean = 0.0, 0.0, 0.0, 0.0
    return AboveKmin(above, marks, first, *best)


def ce_entering(ev: Evidence, node: str) -> dict[float, float]:
    """CE-marked packets that arrived at `node`'s ports (TC 3) in each sample interval,
    keyed by the time that ends it. Every port is sampled at the same instants, but a
    port's series starts only once it carries traffic: match by time, not by index."""
    out: dict[float, float] = defaultdict(float)
    for p in tc3_ports(ev):
        if p["node"] != node:
            continue
        s = p.get("series", {}).get("rx_ce", [])
        prev = 0.0  # the series counts from the window's start
        for t, v in s:
            out[t] += v - prev
            prev = v
    return out


def flow_hops(ev: Evidence, flow: dict[str, Any]) -> set[str]:
    """The egress "node:port"s a flow's data leaves through (src NIC, leaf uplinks, spine
    downlinks, the last leaf port), from the spines its QPs were hashed onto."""
    src, dst = flow["src"], flow["dst"]
    if flow.get("op") == "read":
        src, dst = dst, src
    ls, ld = ev.leaf_of(src), ev.leaf_of(dst)
    hops = set()
    for node, peer in ((src, ls), (ld, dst)):
        port = ev.port_towards(node, peer) if node and peer else None
        if port:
            hops.add(f"{node}:{port}")
    spines = flow.get("spines") or sorted({q.get("spine") for q in flow.get("qps", [])
                                           if q.get("spine")})
    for spine in spines:
        if ls and ls != ld:
            up = ev.port_towards(ls, spine)
            down = ev.port_towards(spine, ld) if ld else None
            if up:
                hops.add(f"{ls}:{up}")
            if down:
                hops.add(f"{spine}:{down}")
    return hops


def flow_links(ev: Evidence, flow: dict[str, Any]) -> set[frozenset[str]]:
    """The links ({node, peer}) a flow's data crosses."""
    out = set()
    for hop in flow_hops(ev, flow):
        node, port = hop.split(":", 1)
        peer = ev.peer(node, port)
        if peer:
            out.add(frozenset((node, peer[0])))
    return out


def latency(flow: dict[str, Any]) -> float | None:
    """A flow's handoff p99 (repeated flows), else its FCT per MiB (size-neutral)."""
    if flow.get("handoff_p99_s") is not None:
        return float(flow["handoff_p99_s"])
    if flow.get("fct_s"):
        return float(flow["fct_s"]) / max(flow.get("bytes", 1) / 2**20, 1e-9)
    return None


def tc3_ports(ev: Evidence) -> list[dict[str, Any]]:
    return [p for p in ev.ports if p["tc"] == ROCE_TC]


def active(flows: Iterable[dict[str, Any]], t0: float, t1: float) -> list[dict[str, Any]]:
    """The flows that ran at some time in [t0, t1] (wall seconds since the run's start)."""
    return [f for f in flows if f.get("start_s", 0.0) <= t1
            and (f.get("end_s") is None or f["end_s"] >= t0)]


def _names(flows: Iterable[dict[str, Any]]) -> list[str]:
    return sorted({f["name"] for f in flows})


def _hosts(flows: Iterable[dict[str, Any]]) -> list[str]:
    return sorted({h for f in flows for h in (f["src"], f["dst"])})


# -- 1. pause storm ------------------------------------------------------------


def pause_storm(ev: Evidence) -> list[Finding]:
    pausers = []
    for p in ev.ports:
        if p.get("pause_tx", 0) > 0:
            t = first_rise(p.get("series", {}).get("pause_tx", []))
            pausers.append((t if t is not None else float("inf"), -p["pause_tx"], p))
    if not pausers:
        return []
    pausers.sort(key=lambda x: (x[0], x[1], x[2]["node"], x[2]["port"]))
    by_host = [x for x in pausers if ev.kind(x[2]["node"]) == "host"]
    frames = sum(p["pause_tx"] for _, _, p in pausers)
    if by_host:
        t, _, p = by_host[0]
        host = p["node"]
        leaf = ev.leaf_of(host) or "its leaf"
        congested = (leaf, ev.port_towards(leaf, host) or host)
        why = (f"{host} stopped draining: its NIC sent {p['pause_tx']} PFC frames to {leaf}"
               + (f" (first at {t:.2f} s)" if t != float("inf") else ""))
        root, score = True, 2.2
        fix = (f"find why {host} stopped draining its receive queue (a stalled consumer, a "
               "full completion queue, a hung process); PFC watchdog on the switches would "
               "cap how long one host can pause the fabric")
    else:
        t, _, p = pausers[0]
        origin = p["node"]
        hot = max((q for q in tc3_ports(ev) if q["node"] == origin),
                  key=lambda q: q.get("max_queued", 0), default=None)
        congested = (origin, hot["port"] if hot else "?")
        into = [f for f in active(ev.flows, t, t) if congested[1] in (f["dst"], ev.leaf_of(f["dst"]))]
        if len(into) >= 2:
            why = (f"an incast: {len(into)} flows into {congested[1]} met at {origin}:"
                   f"{congested[1]} and {origin} paused its upstreams from {t:.2f} s")
        else:
            why = (f"{origin}:{congested[1]} congested and {origin} paused its upstreams "
                   f"from {t:.2f} s")
        root, score = False, 1.0
        fix = ("keep ECN/DCQCN reacting before PFC does: check ECN marking on "
               f"{origin} (Kmin below XOFF) and DCQCN on the senders; spread the incast")
    spread = [item("pause_tx_frames", q["pause_tx"], q["node"], q["port"], ROCE_TC,
                   at_s=None if t == float("inf") else t,
                   to=(ev.peer(q["node"], q["port"]) or ("?", "?"))[0])
              for t, _, q in pausers[:12]]
    paused = {k: v for k, v in ev.paused_s.items() if v > 0}
    worst = max(paused.values(), default=0.0)
    congested_key = f"{congested[0]}:{congested[1]}"
    behind = congested[1]  # the host (or the node) the congested port leads to
    victims = [f for f in active(ev.flows, t, float("inf"))
               if f["dst"] != behind and f.get("spines")  # path known
               and any(paused.get(f"{h}:{ROCE_TC}", 0) >= SIGNIFICANT_PAUSE_S
                       for h in flow_hops(ev, f))
               and congested_key not in flow_hops(ev, f)]
    evidence = spread + [item("paused_seconds", v, k.split(":")[0], k.split(":")[1],
                              int(k.split(":")[2]))
                         for k, v in sorted(paused.items(), key=lambda kv: -kv[1])[:6]]
    if ev.window_s and worst < 0.02 * ev.window_s and not victims and not root:
        sev = Severity.INFO
        why = f"brief PFC pauses ({frames} frames, at most {worst:.2f} s paused): {why}"
    else:
        sev = Severity.CRITICAL if victims or root or worst > 0.2 * ev.window_s \
            else Severity.WARNING
    cause = f"pause storm from {congested_key}: {why}"
    if victims:
        cause += (f"; head-of-line blocked {len(victims)} flow(s) that do not use "
                  f"{congested_key}: {', '.join(_names(victims))}")
    into_c = [f for f in active(ev.flows, t, float("inf")) if f["dst"] == behind]
    return [Finding("pause-storm", sev, cause, evidence,
                    {"flows": _names(victims + into_c), "hosts": _hosts(victims + into_c)},
                    fix, score + (0.1 if victims else 0.0),
                    [congested[0], congested_key] + [f"{q['node']}:{q['port']}"
                                                      for _, _, q in pausers])]


# -- 2. ECN off on a switch ----------------------------------------------------


def ecn_off(ev: Evidence) -> list[Finding]:
    if not ev.thresholds:
        return []
    silent: dict[str, list[tuple[dict[str, Any], float, float | None, float]]] = defaultdict(list)
    marking: dict[str, int] = defaultdict(int)
    ce_in: dict[str, dict[float, float]] = {}  # per switch, shared by its ports
    for p in tc3_ports(ev):
        if ev.kind(p["node"]) == "host":
            continue
        if p["node"] not in ce_in:
            ce_in[p["node"]] = ce_entering(ev, p["node"])
        a = above_kmin(ev, p, ce_in[p["node"]])
        marking[p["node"]] += p.get("ce_marked", 0)
        if a.owed >= MARKS_OWED and a.clean_share >= CLEAN_SHARE:
            silent[p["node"]].append((p, a.unmarked_s, a.unmarked_from_s, a.owed))
    out = []
    for node, ports in sorted(silent.items()):
        others = {n: m for n, m in marking.items() if n != node and m > 0}
        pauses = sum(p.get("pause_tx", 0) for p in ev.ports if p["node"] == node)
        ev_items = [item("queued_above_kmin_seconds", a, node, p["port"], ROCE_TC, at_s=f,
                         max_queued=p.get("max_queued", 0), ce_marked_meanwhile=0,
                         marks_expected=round(owed), kmin=ev.thresholds["kmin"])
                    for p, a, f, owed in ports]
        ev_items += [item("ce_marked_packets", m, n) for n, m in sorted(others.items())[:4]]
        if pauses:
            ev_items.append(item("pause_tx_frames", pauses, node))
        hops = {f"{node}:{p['port']}" for p, _, _, _ in ports}
        t0 = min(f or 0.0 for _, _, f, _ in ports)
        t1 = max((f or 0.0) + a for _, a, f, _ in ports)
        hurt = [f for f in active(ev.flows, t0, t1) if flow_hops(ev, f) & hops]
        port_list = ", ".join(f"{node}:{p['port']}" for p, _, _, _ in ports)
        cause = (f"ECN marking is off on {node}: its lossless queue ({port_list}) sat above "
                 f"Kmin for {max(a for _, a, _, _ in ports):.1f} s from "
                 f"{min(f or 0.0 for _, _, f, _ in ports):.2f} s with 0 CE marks where RED "
                 f"owed {round(max(o for _, _, _, o in ports))}"
                 + (f" while {', '.join(sorted(others))} marked" if others else ""))
        if pauses:
            cause += f"; PFC held the line instead ({pauses} pause frames from {node})"
        out.append(Finding("ecn-off", Severity.CRITICAL if pauses else Severity.WARNING, cause,
                           ev_items, {"flows": _names(hurt), "hosts": _hosts(hurt)},
                           f"enable ECN (RED/WRED marking on TC {ROCE_TC}) on {node} with "
                           f"Kmin {ev.thresholds['kmin']} B below XOFF {ev.thresholds['xoff']} B",
                           2.0, [node, *sorted(hops)]))
    return out


# -- 3. DCQCN off or misconfigured on a host -----------------------------------


def dcqcn_host(ev: Evidence) -> list[Finding]:
    per_host: dict[str, dict[str, Any]] = defaultdict(lambda: {"cnps": 0, "cuts": 0, "qps": 0,
                                                              "off": 0, "lowest": [],
                                                              "floor": [], "flows": []})
    for f in ev.flows:
        sender = f["src"] if f.get("op", "write") == "write" else f["dst"]
        h = per_host[sender]
        h["flows"].append(f)
        for q in f.get("qps", []):
            h["qps"] += 1
            h["cnps"] += q.get("cnps_rx") or 0
            d = q.get("dcqcn")
            if d is None:
                h["off"] += 1
            else:
                h["cuts"] += d.get("reductions") or 0
                if d.get("line_bps") and d.get("reductions"):
                    h["lowest"].append(d["lowest_bps"] / d["line_bps"])
                    h["floor"].append(d["min_rate_bps"] / d["line_bps"])
    if not ev.flows:  # live: the engines' host totals and live QPs
        cnps = ev.by_node("rocelab_engine_qp_cnps_received_total")
        cuts = ev.by_node("rocelab_engine_dcqcn_rate_reductions_total")  # finished QPs too
        for host, n in cnps.items():
            per_host[host]["cnps"] += int(n)
            per_host[host]["cuts"] += int(cuts.get(host, 0))
            per_host[host]["qps"] += 1
    paused = sum(ev.paused_s.values())
    out = []
    for host, h in sorted(per_host.items()):
        if h["cnps"] < MIN_CNPS:
            continue
        flows = h["flows"]
        if h["cuts"] == 0:
            cause = (f"DCQCN is off on {host}: its QPs received {h['cnps']} CNPs and cut their "
                     "rate 0 times")
            fix = f"enable DCQCN on {host}'s NIC (the RoCE congestion-control profile)"
            score = 1.8
        elif h["floor"] and min(h["floor"]) >= MIN_RATE_SHARE and any(
                low <= floor * 1.05 for low, floor in zip(h["lowest"], h["floor"])):
            cause = (f"DCQCN on {host} cannot slow down enough: its QPs' rate cuts stopped at "
                     f"the minimum rate, {min(h['floor']):.0%} of line rate, with "
                     f"{h['cnps']} CNPs still arriving")
            fix = f"lower {host}'s DCQCN min rate (rpg_min_rate) to a few % of line rate"
            score = 1.6
        else:
            continue
        sev = Severity.CRITICAL if paused > 0 else Severity.WARNING
        evidence = [item("cnps_received", h["cnps"], host),
                    item("dcqcn_rate_reductions", h["cuts"], host),
                    item("qps", h["qps"], host, dcqcn_off_qps=h["off"])]
        if paused:
            evidence.append(item("paused_seconds_fabric", paused))
        out.append(Finding("dcqcn-off-host", sev, cause, evidence,
                           {"flows": _names(flows), "hosts": [host]}, fix, score, [host]))
    return out


# -- 4. ECMP collision / polarization ------------------------------------------


def ecmp_collision(ev: Evidence) -> list[Finding]:
    tx = ev.by_port("rocelab_interface_tx_bytes_total")
    stats = {(p["node"], p["port"]): p for p in tc3_ports(ev)}
    spines = sorted(n for n, k in ev.kinds.items() if k == "spine")
    leaves = sorted(n for n, k in ev.kinds.items() if k == "leaf")
    kmin = ev.thresholds.get("kmin", 0)
    out = []
    for leaf in leaves:
        down = {}
        for spine in spines:
            port = ev.port_towards(spine, leaf)
            if port:
                down[spine] = (port, tx.get(f"{spine}:{port}", 0.0), stats.get((spine, port)))
        if len(down) < 2:
            continue
        hot_spine = max(down, key=lambda s: down[s][1])
        port, hot_bytes, hot = down[hot_spine]
        if hot is None:
            continue
        st: dict[str, Any] = hot
        congested = st.get("ce_marked", 0) > 0 or (kmin and st.get("max_queued", 0) > kmin)
        cold = {s: b for s, (_, b, _) in down.items() if s != hot_spine and b < 0.1 * hot_bytes}
        if not congested or not cold or hot_bytes < 1 << 20:
            continue
        crossing = [f for f in ev.flows if ev.leaf_of(f["dst"]) == leaf
                    and hot_spine in (f.get("spines") or [])]
        sports = sorted({q["udp_sport"] for f in crossing for q in f.get("qps", [])
                         if q.get("spine") == hot_spine and q.get("udp_sport")})
        per_spine: dict[str, int] = defaultdict(int)
        for f in ev.flows:
            if ev.leaf_of(f["dst"]) == leaf:
                for s in f.get("spines") or []:
                    per_spine[s] += 1
        if len(crossing) < 2 and ev.flows:
            continue  # one flow on one spine: congestion, not a collision
        if not ev.flows and above_kmin(ev, st).seconds < MIN_ABOVE_KMIN_S:
            continue  # live, flows unknown: one flow's first burst marks too; want a standing queue
        evidence = [item("tx_bytes", hot_bytes, hot_spine, port),
                    *[item("tx_bytes", b, s, down[s][0]) for s, b in sorted(cold.items())],
                    item("ce_marked_packets", st.get("ce_marked", 0), hot_spine, port, ROCE_TC),
                    item("max_queued_bytes", st.get("max_queued", 0), hot_spine, port, ROCE_TC)]
        if sports:
            evidence.append(item("udp_source_ports", len(sports), hot_spine, sports=sports))
        share = ", ".join(f"{s} {per_spine.get(s, 0)}" for s in spines)
        cause = (f"ECMP collision toward {leaf}: " +
                 (f"{len(crossing)} flows ({', '.join(_names(crossing))}) hashed onto "
                  if crossing else "the traffic hashed onto ") +
                 f"{hot_spine} ({hot_spine}:{port} queued {st.get('max_queued', 0)} B and "
                 f"marked {st.get('ce_marked', 0)}) while {', '.join(sorted(cold))} carried "
                 f"{int(max(cold.values()))} B" + (f"; flows per spine: {share}" if ev.flows else ""))
        out.append(Finding("ecmp-collision", Severity.WARNING, cause, evidence,
                           {"flows": _names(crossing), "hosts": _hosts(crossing)},
                           "spread the flows: more QPs per transfer (more UDP source ports), "
                           "hash on L4 (ecmp_hash: l4) with per-QP source ports, or "
                           "flowlet/adaptive routing on the leaves",
                           1.2, [hot_spine, f"{hot_spine}:{port}", leaf]))
    return out


# -- 5. congested spine on a prefill->decode path -------------------------------


def congested_spine(ev: Evidence, skip: set[str] | None = None) -> list[Finding]:
    kmin = ev.thresholds.get("kmin", 0)
    out = []
    for p in tc3_ports(ev):
        if ev.kind(p["node"]) != "spine" or f"{p['node']}:{p['port']}" in (skip or set()):
            continue
        a = above_kmin(ev, p)
        above, first = a.seconds, a.first_s
        if not (kmin and p.get("max_queued", 0) > kmin and above >= MIN_ABOVE_KMIN_S / 2):
            continue
        hop = f"{p['node']}:{p['port']}"
        crossing = [f for f in ev.flows if hop in flow_hops(ev, f)]
        avoiding = [f for f in ev.flows if f not in crossing]
        if any(f.get("handoff_p99_s") for f in crossing) and \
                any(f.get("handoff_p99_s") for f in avoiding):  # like with like: KV handoffs
            crossing_l = [f for f in crossing if f.get("handoff_p99_s")]
            avoiding_l = [f for f in avoiding if f.get("handoff_p99_s")]
        else:
            crossing_l, avoiding_l = crossing, avoiding
        lat_c = [v for f in crossing_l if (v := latency(f)) is not None]
        lat_a = [v for f in avoiding_l if (v := latency(f)) is not None]
        slower = median(lat_c) / median(lat_a) if lat_c and lat_a and median(lat_a) > 0 else None
        sev = Severity.WARNING if slower is not None and slower >= 1.5 else Severity.INFO
        evidence = [item("queued_above_kmin_seconds", above, p["node"], p["port"], ROCE_TC,
                         at_s=first, max_queued=p.get("max_queued", 0)),
                    item("ce_marked_packets", p.get("ce_marked", 0), p["node"], p["port"], ROCE_TC)]
        if slower is not None:
            evidence.append(item("latency_ratio_crossing_vs_avoiding", slower,
                                 crossing_p99=max(lat_c), avoiding_p99=max(lat_a)))
        cause = (f"{p['node']} is congested toward {p['port']}: queue above Kmin for "
                 f"{above:.1f} s (peak {p.get('max_queued', 0)} B)")
        if crossing:
            cause += f"; {len(crossing)} flow(s) cross it: {', '.join(_names(crossing))}"
        if slower is not None:
            cause += f", {slower:.1f}x the latency of flows that avoid it"
        out.append(Finding("congested-spine", sev, cause, evidence,
                           {"flows": _names(crossing), "hosts": _hosts(crossing)},
                           f"move decode placement or pin flows away from {p['node']}; add "
                           "spine capacity or QPs so ECMP spreads the load",
                           0.8, [p["node"], hop]))
    return out


# -- 6. routing -------------------------------------------------------------------


def routing(ev: Evidence) -> list[Finding]:
    out = []
    for labels, up in sorted(ev.metric("rocelab_bgp_session_up").items()):
        d = dict(labels)
        if up == 0:
            peer = ev.peer(d["node"], d["port"])
            out.append(Finding(
                "routing", Severity.CRITICAL,
                f"BGP session {d['node']} -> {d['port']} is down",
                [item("bgp_session_up", 0, d["node"], d["port"]),
                 item("interface_up", ev.by_port("rocelab_interface_up").get(
                     f"{d['node']}:{d['port']}", 0), d["node"], d["port"])],
                {"flows": [], "hosts": []},
                f"check the link {d['node']}-{peer[0] if peer else d['port']} (carrier, "
                "addresses, BGP config) and `rocelab status`", 2.5,
                [d["node"], f"{d['node']}:{d['port']}"]))
    expected = ev.by_node("rocelab_bgp_ecmp_expected_paths")
    for node, got in sorted(ev.by_node("rocelab_bgp_ecmp_min_paths").items()):
        want = expected.get(node)
        if want and got < want:
            out.append(Finding("routing", Severity.WARNING,
                               f"{node} has {int(got)} ECMP next hop(s) toward some host "
                               f"prefix, the plan gives {int(want)}",
                               [item("bgp_ecmp_min_paths", got, node),
                                item("bgp_ecmp_expected_paths", want, node)],
                               {"flows": [], "hosts": []},
                               f"find {node}'s missing paths: a session down, a link failed, "
                               "maximum-paths too low", 2.3, [node]))
    for node, n in sorted(ev.by_node("rocelab_bgp_host_prefixes_missing").items()):
        if n > 0:
            out.append(Finding("routing", Severity.CRITICAL,
                               f"{node} has no route to {int(n)} host prefix(es)",
                               [item("bgp_host_prefixes_missing", n, node)],
                               {"flows": [], "hosts": []},
                               f"check the sessions of {node} and the origin leaves' "
                               "redistribution", 2.6, [node]))
    for node, up in sorted(ev.by_node("rocelab_bgp_daemon_up").items()):
        if up == 0:
            out.append(Finding("routing", Severity.CRITICAL, f"FRR on {node} does not answer",
                               [item("bgp_daemon_up", 0, node)], {"flows": [], "hosts": []},
                               f"look at {node}'s bgpd/zebra logs in the run directory",
                               2.7, [node]))
    return out


def _directions(ev: Evidence) -> Iterable[tuple[str, str, str, str]]:
    """Every link direction between two routers or a leaf and a host: (a, a_port, b, b_port)."""
    for key, other in sorted(ev.peers.items()):
        a, ap = key.split(":", 1)
        b, bp = other.split(":", 1)
        yield a, ap, b, bp


def silent_links(ev: Evidence) -> list[Finding]:
    """Routing findings too: links that carry nothing one way while carrier is up."""
    tx = ev.by_port("rocelab_interface_tx_packets_total")
    rx = ev.by_port("rocelab_interface_rx_packets_total")
    up = ev.by_port("rocelab_interface_up")
    sessions = {f"{dict(lb)['node']}:{dict(lb)['port']}": v
                for lb, v in ev.metric("rocelab_bgp_session_up").items()}
    out = []
    for a, ap, b, bp in _directions(ev):
        sent, got = tx.get(f"{a}:{ap}"), rx.get(f"{b}:{bp}")
        if sent is None or got is None or sent < 20 or got > 0:
            continue
        if not (up.get(f"{a}:{ap}", 1) and up.get(f"{b}:{bp}", 1)):
            continue
        still = sessions.get(f"{a}:{ap}")
        cause = (f"link {a}-{b} is silent: {a} sent {int(sent)} packets to {b}, {b} "
                 f"received none, yet carrier is up"
                 + (" and BGP still holds the session (no BFD): traffic is black-holed"
                    if still else ""))
        out.append(Finding("routing", Severity.CRITICAL, cause,
                           [item("tx_packets", sent, a, ap), item("rx_packets", 0, b, bp),
                            item("bgp_session_up", still if still is not None else -1, a, ap)],
                           {"flows": _names(f for f in ev.flows if frozenset((a, b))
                                            in flow_links(ev, f)), "hosts": []},
                           f"enable BFD on {a}-{b} so the fabric routes around a silent "
                           "link in milliseconds; replace the link", 2.4,
                           [a, b, f"{a}:{ap}", f"{b}:{bp}"]))
    return out


# -- 7. gray link -------------------------------------------------------------------


def gray_link(ev: Evidence, silent: set[frozenset[str]] | None = None) -> list[Finding]:
    tx = ev.by_port("rocelab_interface_tx_packets_total")
    rx = ev.by_port("rocelab_interface_rx_packets_total")
    lossy: dict[frozenset[str], list[dict[str, Any]]] = defaultdict(list)
    for a, ap, b, bp in _directions(ev):
        sent, got = tx.get(f"{a}:{ap}"), rx.get(f"{b}:{bp}")
        if sent is None or got is None or sent < LOSS_MIN_PACKETS or got == 0:
            continue
        lost = sent - got
        if lost >= LOSS_MIN_LOST and lost / sent >= LOSS_RATIO:
            lossy[frozenset((a, b))].append(item("lost_packets", lost, a, ap, to=b,
                                                 sent=int(sent), ratio=round(lost / sent, 4)))
    bad = [f for f in ev.flows if any((q.get(k) or 0) > 0 for q in f.get("qps", [])
                                      for k in ("retransmitted_packets", "naks_rx", "bad_icrc"))
           or (f.get("bad_icrc") or 0) > 0]
    clean = [f for f in ev.flows if f not in bad and f.get("qps")]
    corrupt = [f for f in bad if (f.get("bad_icrc") or 0) > 0]
    suspects: dict[frozenset[str], list[dict[str, Any]]] = {}
    if bad:  # links every damaged flow crosses and no clean flow does
        common = set.intersection(*(flow_links(ev, f) for f in bad))
        for f in clean:
            common -= flow_links(ev, f)
        for link in common:
            if ev.kinds.get(min(link)) == "host" or ev.kinds.get(max(link)) == "host":
                continue  # the edge link: the flow's own NIC, not the fabric
            suspects[link] = []
    # The two ends of a link are read a few ms apart, so a link busy at either edge of
    # the window shows packets "in flight" as lost; a RoCE flow that really lost packets
    # retransmits. Counter loss counts only with retransmissions behind it: a damaged flow
    # across that link (a run), or any host retransmitting (live: paths are unknown).
    live_retx = sum(ev.by_node("rocelab_engine_qp_retransmitted_packets_total").values())
    lossy = {link: e for link, e in lossy.items()
             if any(link in flow_links(ev, f) for f in bad) or (not ev.flows and live_retx > 0)}
    links = set(lossy) | set(suspects)
    links -= silent or set()
    out = []
    for link in sorted(links, key=sorted):
        a, b = sorted(link)
        hurt = [f for f in bad if link in flow_links(ev, f)]
        retx = sum(q.get("retransmitted_packets") or 0 for f in hurt for q in f.get("qps", []))
        naks = sum(q.get("naks_rx") or 0 for f in hurt for q in f.get("qps", []))
        icrc = sum(f.get("bad_icrc") or 0 for f in hurt)
        if not lossy.get(link) and not hurt:
            continue
        what = "corrupts" if icrc and any(f in corrupt for f in hurt) else "loses"
        evidence = list(lossy.get(link, []))
        if hurt:
            evidence += [item("retransmitted_packets", retx, flows=len(hurt)),
                         item("naks_received", naks), item("bad_icrc_packets", icrc)]
        ratios = ", ".join(f"{e['ratio']:.2%} {e['node']}->{e['to']}" for e in lossy.get(link, []))
        cause = (f"gray link {a}-{b}: it {what} packets while staying up and routed"
                 + (f" ({ratios} lost)" if ratios else "")
                 + (f"; {len(hurt)} flow(s) crossing it retransmitted {retx} packets, "
                    f"{icrc} bad ICRC, and flows avoiding it did not" if hurt else ""))
        out.append(Finding("gray-link", Severity.CRITICAL if lossy.get(link) or retx > 100
                           else Severity.WARNING, cause, evidence,
                           {"flows": _names(hurt), "hosts": _hosts(hurt)},
                           f"drain {a}-{b} (shut it or raise its BGP cost) and replace the "
                           "optic/cable; a RoCE flow pays a go-back-N retransmission per loss",
                           1.7, [a, b]))
    return out


# -- 8. lossless drops ------------------------------------------------------------


def lossless_drops(ev: Evidence) -> list[Finding]:
    out = []
    sent: dict[str, int] = defaultdict(int)  # PFC frames each node sent (counted under TC 0)
    for p in ev.ports:
        sent[p["node"]] += p.get("pause_tx", 0)
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
                           {"flows": _names(hurt), "hosts": _hosts(hurt)}, fix,
                           2.8 + min(0.19, math.log10(drops) / 100), [node, f"{node}:{port}"]))
    return out


# -- 9. MTU mismatch ---------------------------------------------------------------


def mtu_mismatch(ev: Evidence) -> list[Finding]:
    mtu = ev.by_port("rocelab_interface_mtu_bytes")
    drops = ev.by_port("rocelab_interface_tx_dropped_packets_total")
    need = ev.roce_mtu + ROCE_HEADERS
    bad: list[tuple[str, str, str, str, float, float]] = []
    seen: set[frozenset[str]] = set()
    for a, ap, b, bp in _directions(ev):
        link = frozenset((a, b))
        ma, mb = mtu.get(f"{a}:{ap}"), mtu.get(f"{b}:{bp}")
        if ma is None or mb is None or link in seen or (ma == mb and ma >= need):
            continue
        seen.add(link)
        bad.append((a, ap, b, bp, ma, mb))
    # a node whose own ends differ from every peer's: one finding for all its links
    odd: dict[str, list[tuple[str, str, str, str, float, float]]] = defaultdict(list)
    for a, ap, b, bp, ma, mb in bad:
        if ma != mb:
            node, port, peer, peer_port, mine, theirs = (a, ap, b, bp, ma, mb) if ma < mb \
                else (b, bp, a, ap, mb, ma)
            odd[node].append((node, port, peer, peer_port, mine, theirs))
        else:
            odd[f"{a}-{b}"].append((a, ap, b, bp, ma, mb))
    out = []
    for key, links in sorted(odd.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        small = min(min(m, t) for *_, m, t in links)
        node = links[0][0]
        peers = [lk[2] for lk in links]
        pairs = {frozenset((lk[0], lk[2])) for lk in links}
        hurt = [f for f in ev.flows if flow_links(ev, f) & pairs]
        dropped = sum(drops.get(f"{lk[2]}:{lk[3]}", 0) + drops.get(f"{lk[0]}:{lk[1]}", 0)
                      for lk in links)
        if "-" in key:
            cause = f"MTU {int(small)} on both ends of {key}"
        else:
            cause = (f"MTU mismatch: {node}'s end of {len(links)} link(s) is at "
                     f"{int(links[0][4])} while {', '.join(peers)} are at "
                     f"{int(max(t for *_, t in links))}")
        if small < need:
            cause += (f": below the {need} B a {ev.roce_mtu} B RoCE frame needs, so full "
                      "frames are dropped")
        evidence = [item("mtu_bytes", m, n, p) for n, p, *_, m, _ in links[:4]]
        evidence += [item("mtu_bytes", t, pe, pp) for _, _, pe, pp, _, t in links[:4]]
        evidence.append(item("tx_dropped_packets", dropped, node))
        out.append(Finding("mtu-mismatch", Severity.CRITICAL if small < need else Severity.WARNING,
                           cause, evidence, {"flows": _names(hurt), "hosts": _hosts(hurt)},
                           f"set the same MTU on both ends ({node} and its peers), at least "
                           f"{need} (9000 on a RoCE fabric), or lower the RoCE path MTU",
                           3.0, [node, *peers, *[f"{lk[0]}:{lk[1]}" for lk in links]]))
    return out


RULES: tuple[Callable[[Evidence], list[Finding]], ...] = (
    pause_storm, ecn_off, dcqcn_host, ecmp_collision, routing, lossless_drops, mtu_mismatch)
