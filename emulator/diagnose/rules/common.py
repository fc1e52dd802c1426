"""What every rule shares: the Finding type, its evidence items, and views of the
evidence (a queue above Kmin and the marks RED owed it, a flow's hops and links, the
flows active in a window)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from ...metrics.snapshot import PortSample
from ..evidence import Evidence

ROCE_TC = 3  # the lossless RoCE class: its queues, marks and pauses are what the rules read


class Severity(IntEnum):
    INFO = 0
    WARNING = 1
    CRITICAL = 2

    def __str__(self) -> str:
        return self.name.lower()


@dataclass
class Finding:
    kind: str  # pause-storm, ecn-off, dcqcn-off-host, ecmp-collision, congested-spine,
    # routing, gray-link, lossless-drops, mtu-mismatch, trimming-hotspot
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


def mark_probability(ev: Evidence, depth: float) -> float:
    """RED's marking probability at a queue depth, as the dataplane draws it (fabric.bpf.c's
    red_mark; tests/unit/test_red_mark.py holds the two together)."""
    t = ev.thresholds
    kmin, kmax, pmax = t["kmin"], t["kmax"], t.get("pmax_ppm", 200_000) / 1e6
    if depth <= kmin:
        return 0.0
    return 1.0 if depth >= kmax else pmax * (depth - kmin) / (kmax - kmin)


def above_kmin(ev: Evidence, port: PortSample, ce_in: dict[float, float] | None = None
               ) -> AboveKmin:
    """`ce_in`: per sample interval, CE-marked packets that entered the port's node (they
    may all have left through this port: the estimate of unmarked arrivals is low)."""
    kmin = ev.thresholds.get("kmin")
    s = port["series"]
    q, ce, tx, ect = s["queued"], s["ce_marked"], s["tx_bytes"], s["ecn_capable"]
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
            run_owed += clean * mark_probability(ev, (q[i - 1][1] + q[i][1]) / 2)
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
        prev = 0.0  # the series counts from the window's start
        for t, v in p["series"]["rx_ce"]:
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


def tc3_ports(ev: Evidence) -> list[PortSample]:
    return [p for p in ev.ports if p["tc"] == ROCE_TC]


def active(flows: Iterable[dict[str, Any]], t0: float, t1: float) -> list[dict[str, Any]]:
    """The flows that ran at some time in [t0, t1] (wall seconds since the run's start)."""
    return [f for f in flows if f.get("start_s", 0.0) <= t1
            and (f.get("end_s") is None or f["end_s"] >= t0)]


def names(flows: Iterable[dict[str, Any]]) -> list[str]:
    return sorted({f["name"] for f in flows})


def hosts(flows: Iterable[dict[str, Any]]) -> list[str]:
    return sorted({h for f in flows for h in (f["src"], f["dst"])})


def affected(flows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """A finding's `affected`: the flows' names and their hosts."""
    return {"flows": names(flows), "hosts": hosts(flows)}


def directions(ev: Evidence) -> Iterable[tuple[str, str, str, str]]:
    """Every link direction between two routers or a leaf and a host: (a, a_port, b, b_port)."""
    for key, other in sorted(ev.peers.items()):
        a, ap = key.split(":", 1)
        b, bp = other.split(":", 1)
        yield a, ap, b, bp
