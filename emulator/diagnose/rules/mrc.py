"""MRC rule: path-imbalance, an MRC connection whose load sits on few paths or whose EVs
are mostly retired (docs/diagnose.md).

A connection is what the engine reports (docs/mrc.md, "stats"): its EV set by state and,
per path (one EV on one plane), the bytes sprayed on it, its state and, from a run, the
spine its five-tuple hashes to. From a run the connections are results.json flows' `mrc`
blocks; live they are rebuilt from the engines' `rocelab_mrc_*` series (evidence.py).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from ..evidence import Evidence
from .common import Finding, Severity, item

PATH_RATIO = 3.0  # the busiest EV carried this many times the mean bytes per EV
SPINE_RATIO = 1.5  # the busiest spine carried this many times the mean over the spines
RETIRED_SHARE = 0.25  # this share of the EV set ASSUMED_BAD or DENIED
MIN_BYTES = 1 << 20  # load checks need this many bytes on the connection
RETIRED = ("assumed_bad", "denied")
NAMED = 8  # at most this many EVs named in a cause


@dataclass(frozen=True)
class Conn:
    """One MRC connection as the rule reads it."""

    name: str  # the flow
    src: str
    dst: str
    raw: dict[str, Any]  # the stats entry (contract: docs/mrc.md)

    @property
    def paths(self) -> list[dict[str, Any]]:
        return list(self.raw.get("paths") or [])

    @property
    def evs(self) -> int:
        return int(self.raw.get("evs_total") or len(self.paths))

    def by_state(self) -> dict[str, int]:
        got = self.raw.get("evs_by_state")
        if got:
            return {k: int(v) for k, v in got.items()}
        out: dict[str, int] = defaultdict(int)
        for p in self.paths:
            out[_state(p)] += 1
        return dict(out)

    @property
    def floor(self) -> int:
        """ev_min_active: the engine's default, a quarter of the EVs, at least 1."""
        return int(self.raw.get("ev_min_active") or max(1, self.evs // 4))


def connections(ev: Evidence) -> list[Conn]:
    """Every MRC connection the evidence holds: a run's flows' `mrc` blocks (one per
    transfer, or a list), and the live ones evidence.collect rebuilt."""
    out = []
    for f in ev.flows:
        blocks = f.get("mrc") or []
        for block in blocks if isinstance(blocks, list) else [blocks]:
            out.append(Conn(f["name"], f["src"], f["dst"], block))
    for block in ev.mrc:
        out.append(Conn(block.get("flow") or f"{block['src']}->{block['dst']}",
                        block["src"], block["dst"], block))
    return out


def path_imbalance(ev: Evidence) -> list[Finding]:
    out = []
    for conn in connections(ev):
        reasons = [r for r in (_concentrated(ev, conn), _retired(ev, conn)) if r]
        if reasons:
            out.append(_finding(conn, reasons))
    return out


@dataclass
class Reason:
    severity: Severity
    cause: str
    evidence: list[dict[str, Any]]
    fix: str
    where: list[str]


def _concentrated(ev: Evidence, conn: Conn) -> Reason | None:
    paths = [p for p in conn.paths if p.get("bytes") is not None]
    total = sum(float(p["bytes"]) for p in paths)
    if len(paths) < 2 or total < MIN_BYTES:
        return None
    retired = sum(1 for p in conn.paths if _state(p) in RETIRED)  # the retired rule's part
    mean = total / max(1, max(conn.evs, len(paths)) - retired)
    busy = sorted(paths, key=lambda p: -float(p["bytes"]))
    hot = [p for p in busy if float(p["bytes"]) >= PATH_RATIO * mean]
    spines = _spine_load(ev, conn)
    spine_mean = sum(spines.values()) / len(spines) if spines else 0.0
    hot_spines = [s for s, b in sorted(spines.items(), key=lambda kv: -kv[1])
                  if spine_mean and b >= SPINE_RATIO * spine_mean]
    if not hot and not hot_spines:
        return None
    parts, evidence = [], [item("mrc_path_bytes_total", total, conn=_cid(conn), paths=len(paths))]
    if hot:
        share = sum(float(p["bytes"]) for p in hot) / total
        parts.append(f"{len(hot)} of {conn.evs} EVs ({_evs(hot)}) carried {share:.0%} of "
                     f"{total / 1e6:.1f} MB, the busiest {float(busy[0]['bytes']) / mean:.1f}x "
                     "the mean per EV")
        evidence += [item("mrc_path_bytes", float(p["bytes"]), ev=p.get("ev"),
                          plane=p.get("plane", 0), spine=p.get("spine"), state=_state(p))
                     for p in hot[:NAMED]]
    links: list[str] = []
    if hot_spines:
        links = [lk for s in hot_spines for lk in _links(ev, conn, s)]
        load = ", ".join(f"{s} {b / total:.0%}" for s, b in sorted(spines.items()))
        parts.append(f"{hot_spines[0]} carried {spines[hot_spines[0]] / spine_mean:.1f}x the "
                     f"mean spine ({load}) over {', '.join(links) or 'its links'}")
        evidence += [item("mrc_spine_bytes", b, spine=s) for s, b in sorted(spines.items())]
    return Reason(Severity.WARNING, "load concentrated: " + "; ".join(parts), evidence,
                  "spread the EVs: more of them (--evs), an ECMP hash over the UDP source "
                  "port on every leaf (ecmp_hash: l4), and check the hot spine's links",
                  hot_spines + links)


def _retired(ev: Evidence, conn: Conn) -> Reason | None:
    states = conn.by_state()
    bad = sum(states.get(s, 0) for s in RETIRED)
    if not conn.evs or bad / conn.evs < RETIRED_SHARE:
        return None
    good = states.get("good", 0)
    at_floor = good <= conn.floor
    retired = [p for p in conn.paths if _state(p) in RETIRED]
    by_spine: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in retired:
        by_spine[p.get("spine") or "?"].append(p)
    spines = sorted((s for s in by_spine if s != "?"), key=lambda s: -len(by_spine[s]))
    links = [lk for s in spines for lk in _links(ev, conn, s)]
    cause = (f"{bad} of {conn.evs} EVs retired ({', '.join(f'{s} {states.get(s, 0)}' for s in RETIRED)}"
             + (f"; at its floor of {conn.floor} good EVs" if at_floor else "") + ")")
    if retired:
        cause += f": {_evs(retired)}"
    if spines:
        cause += "; through " + ", ".join(f"{s} ({len(by_spine[s])})" for s in spines)
        cause += f" on {', '.join(links)}" if links else ""
    evidence = [item("mrc_evs", states.get(s, 0), conn=_cid(conn), state=s)
                for s in ("good", *RETIRED)]
    evidence.append(item("mrc_ev_retirements_total", float(conn.raw.get("retirements", 0)),
                         conn=_cid(conn), floor=conn.floor))
    return Reason(Severity.CRITICAL if at_floor else Severity.WARNING, cause, evidence,
                  "find what drops on the named spine or links (rocelab status, the "
                  "gray-link and routing findings); retired EVs return when their probes "
                  "are answered" + ("; at the floor further losses are no longer routed "
                                    "around" if at_floor else ""), spines + links)


def _finding(conn: Conn, reasons: list[Reason]) -> Finding:
    severity = max(r.severity for r in reasons)
    cause = (f"MRC connection {_cid(conn)} ({conn.name}, {conn.src} -> {conn.dst}): "
             + "; ".join(r.cause for r in reasons))
    where = [w for r in reasons for w in r.where] or [conn.src]
    return Finding("path-imbalance", severity, cause, [e for r in reasons for e in r.evidence],
                   {"flows": [conn.name], "hosts": sorted({conn.src, conn.dst})},
                   "; ".join(r.fix for r in reasons), 1.0, list(dict.fromkeys(where)))


def _spine_load(ev: Evidence, conn: Conn) -> dict[str, float]:
    """Bytes per spine (paths with a known spine); single-plane: every spine of the
    fabric counts, a spine no EV hashes to with 0 bytes. A spine whose EVs are all
    retired is left out: the load it lost is the retired rule's finding, not a hot spot."""
    out: dict[str, float] = defaultdict(float)
    alive: set[str] = set()
    for p in conn.paths:
        if p.get("spine"):
            out[str(p["spine"])] += float(p.get("bytes") or 0)
            if _state(p) not in RETIRED:
                alive.add(str(p["spine"]))
    if out and not any(p.get("plane") for p in conn.paths):
        for node, kind in ev.kinds.items():
            if kind == "spine" and node not in out:
                out[node] = 0.0
                alive.add(node)
    return {s: b for s, b in out.items() if s in alive}


def _links(ev: Evidence, conn: Conn, spine: str) -> list[str]:
    """The leaf-spine links a path through `spine` crosses: up from the source's leaf,
    down to the destination's."""
    out = []
    for a, b in ((_leaf(ev, conn.src, spine), spine), (spine, _leaf(ev, conn.dst, spine))):
        if a and b and a != b and ev.port_towards(a, b):
            out.append(f"{a}-{b}")
    return out


def _leaf(ev: Evidence, host: str, spine: str) -> str | None:
    """The host's leaf that connects to `spine` (a multi-plane host has one leaf per plane)."""
    leaves = [o.split(":", 1)[0] for k, o in sorted(ev.peers.items()) if k.startswith(f"{host}:")]
    return next((lf for lf in leaves if ev.port_towards(lf, spine)), leaves[0] if leaves else None)


def _state(path: dict[str, Any]) -> str:
    return str(path.get("state", "unknown")).lower()


def _evs(paths: list[dict[str, Any]]) -> str:
    names = [f"EV {p.get('ev')}" + (f"/plane {p['plane']}" if p.get("plane") else "")
             for p in paths[:NAMED]]
    return ", ".join(names) + (f" and {len(paths) - NAMED} more" if len(paths) > NAMED else "")


def _cid(conn: Conn) -> str:
    return str(conn.raw.get("conn", "?"))
