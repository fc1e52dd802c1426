"""Congestion-control rules: ECN marking off on a switch, DCQCN off or misconfigured on
a sending host."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ...metrics.snapshot import PortSample
from ..evidence import Evidence
from .common import (
    ROCE_TC,
    Finding,
    Severity,
    above_kmin,
    active,
    affected,
    ce_entering,
    flow_hops,
    item,
    names,
    tc3_ports,
)

MARKS_OWED = 20  # marks RED owed a stretch with none: P(0 | marking on) = e^-20
CLEAN_SHARE = 0.1  # ... and some packets in it arrived unmarked (the CE counts upstream and
# here are sampled 100 ms apart at slightly different times: a small share is noise)
MIN_RATE_SHARE = 0.1  # a DCQCN floor at 10 % of line rate or more, reached: set too high
MIN_CNPS = 5  # CNPs a host must have received before its (lack of) rate cuts mean anything

Silent = tuple[PortSample, float, float | None, float]  # port, unmarked s, from s, marks owed


# -- ECN off on a switch ----------------------------------------------------------


def ecn_off(ev: Evidence) -> list[Finding]:
    if not ev.thresholds:
        return []
    silent, marking = _unmarked_queues(ev)
    return [_ecn_off_finding(ev, node, ports, {n: m for n, m in marking.items()
                                               if n != node and m > 0})
            for node, ports in sorted(silent.items())]


def _unmarked_queues(ev: Evidence) -> tuple[dict[str, list[Silent]], dict[str, int]]:
    """Per switch, its lossless queues that sat above Kmin owing marks and made none; and
    the CE marks each switch made."""
    silent: dict[str, list[Silent]] = defaultdict(list)
    marking: dict[str, int] = defaultdict(int)
    ce_in: dict[str, dict[float, float]] = {}  # per switch, shared by its ports
    for p in tc3_ports(ev):
        if ev.kind(p["node"]) == "host":
            continue
        if p["node"] not in ce_in:
            ce_in[p["node"]] = ce_entering(ev, p["node"])
        a = above_kmin(ev, p, ce_in[p["node"]])
        marking[p["node"]] += p["ce_marked"]
        if a.owed >= MARKS_OWED and a.clean_share >= CLEAN_SHARE:
            silent[p["node"]].append((p, a.unmarked_s, a.unmarked_from_s, a.owed))
    return silent, marking


def _ecn_off_finding(ev: Evidence, node: str, ports: list[Silent], others: dict[str, int]
                     ) -> Finding:
    pauses = sum(p["pause_tx"] for p in ev.ports if p["node"] == node)
    ev_items = [item("queued_above_kmin_seconds", a, node, p["port"], ROCE_TC, at_s=f,
                     max_queued=p["max_queued"], ce_marked_meanwhile=0,
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
             f"{t0:.2f} s with 0 CE marks where RED "
             f"owed {round(max(o for _, _, _, o in ports))}"
             + (f" while {', '.join(sorted(others))} marked" if others else ""))
    if pauses:
        cause += f"; PFC held the line instead ({pauses} pause frames from {node})"
    return Finding("ecn-off", Severity.CRITICAL if pauses else Severity.WARNING, cause,
                   ev_items, affected(hurt),
                   f"enable ECN (RED/WRED marking on TC {ROCE_TC}) on {node} with "
                   f"Kmin {ev.thresholds['kmin']} B below XOFF {ev.thresholds['xoff']} B",
                   2.0, [node, *sorted(hops)])


# -- DCQCN off or misconfigured on a host ------------------------------------------


@dataclass
class Sender:
    """What a sending host's QPs did: CNPs received, rate cuts, and their rate floors."""

    cnps: int = 0
    cuts: int = 0
    qps: int = 0
    off: int = 0  # QPs with no DCQCN state at all
    lowest: list[float] = field(default_factory=list)  # per cutting QP: lowest rate / line
    floor: list[float] = field(default_factory=list)  # ... and its min rate / line
    flows: list[dict[str, Any]] = field(default_factory=list)


def dcqcn_host(ev: Evidence) -> list[Finding]:
    paused = sum(ev.paused_s.values())
    out = []
    for host, h in sorted(_senders(ev).items()):
        verdict = _dcqcn_verdict(host, h) if h.cnps >= MIN_CNPS else None
        if verdict is None:
            continue
        cause, fix, score = verdict
        evidence = [item("cnps_received", h.cnps, host),
                    item("dcqcn_rate_reductions", h.cuts, host),
                    item("qps", h.qps, host, dcqcn_off_qps=h.off)]
        if paused:
            evidence.append(item("paused_seconds_fabric", paused))
        out.append(Finding("dcqcn-off-host", Severity.CRITICAL if paused > 0 else Severity.WARNING,
                           cause, evidence, {"flows": names(h.flows), "hosts": [host]}, fix,
                           score, [host]))
    return out


def _senders(ev: Evidence) -> dict[str, Sender]:
    """Per sending host (a write's source, a read's destination): its QPs' DCQCN state; live
    (no flows recorded), the engines' host totals and live QPs."""
    per_host: dict[str, Sender] = defaultdict(Sender)
    for f in ev.flows:
        h = per_host[f["src"] if f.get("op", "write") == "write" else f["dst"]]
        h.flows.append(f)
        for q in f.get("qps", []):
            h.qps += 1
            h.cnps += q.get("cnps_rx") or 0
            d = q.get("dcqcn")
            if d is None:
                h.off += 1
            else:
                h.cuts += d.get("reductions") or 0
                if d.get("line_bps") and d.get("reductions"):
                    h.lowest.append(d["lowest_bps"] / d["line_bps"])
                    h.floor.append(d["min_rate_bps"] / d["line_bps"])
    if not ev.flows:
        cnps = ev.by_node("rocelab_engine_qp_cnps_received_total")
        cuts = ev.by_node("rocelab_engine_dcqcn_rate_reductions_total")  # finished QPs too
        for host, n in cnps.items():
            per_host[host].cnps += int(n)
            per_host[host].cuts += int(cuts.get(host, 0))
            per_host[host].qps += 1
    return per_host


def _dcqcn_verdict(host: str, h: Sender) -> tuple[str, str, float] | None:
    """(cause, fix, score) when CNPs arrived and the rate did not follow; else None."""
    if h.cuts == 0:
        return (f"DCQCN is off on {host}: its QPs received {h.cnps} CNPs and cut their "
                "rate 0 times",
                f"enable DCQCN on {host}'s NIC (the RoCE congestion-control profile)", 1.8)
    if h.floor and min(h.floor) >= MIN_RATE_SHARE and any(
            low <= floor * 1.05 for low, floor in zip(h.lowest, h.floor)):
        return (f"DCQCN on {host} cannot slow down enough: its QPs' rate cuts stopped at "
                f"the minimum rate, {min(h.floor):.0%} of line rate, with "
                f"{h.cnps} CNPs still arriving",
                f"lower {host}'s DCQCN min rate (rpg_min_rate) to a few % of line rate", 1.6)
    return None
