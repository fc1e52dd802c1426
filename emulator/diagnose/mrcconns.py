"""Live MRC connections for diagnose: the engines' `rocelab_mrc_*` series of a window
turned back into the stats entries a run records (docs/mrc.md), with each path's spine
resolved the way a transfer's result resolves it (forwarding.egress_port on the EV).

Each end of a connection reports it under its own id; the sender's entry (node == src)
is the one whose paths carry the sprayed bytes, so a flow's receivers' entries are left
out when its sender reports. Path bytes are what
the window added; EV states are their value at its end. The engine's "finished" entries
(each flow's ended connections summed, without paths) are left out: their EV states are
history, not the window's.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .. import forwarding
from ..errors import RocelabError
from ..metrics.snapshot import Metrics, labels_of
from ..plan import Plan

MAX_LOOKUPS = 512  # `ip route get` calls one live diagnose spends on EV spines
FINISHED = "finished"  # the engine's id for the summed finished connections of a flow
STATE_CODES = {0: "unknown", 1: "good", 2: "assumed_bad", 3: "denied"}  # engine_mrc.PATH_STATE


def from_metrics(metrics: Metrics) -> list[dict[str, Any]]:
    conns: dict[tuple[str, str], dict[str, Any]] = {}
    for key, value in metrics.get("rocelab_mrc_evs", {}).items():
        d = dict(labels_of(key))
        c = conns.setdefault((d["node"], d["conn"]), _conn(d))
        c["evs_by_state"][d["state"]] = int(value)
    for key, value in metrics.get("rocelab_mrc_evs_configured", {}).items():
        d = dict(labels_of(key))
        conns.setdefault((d["node"], d["conn"]), _conn(d))["evs_total"] = int(value)
    for key, value in metrics.get("rocelab_mrc_ev_retirements_total", {}).items():
        d = dict(labels_of(key))
        conns.setdefault((d["node"], d["conn"]), _conn(d))["retirements"] = int(value)
    paths: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for name, field in (("rocelab_mrc_path_bytes_total", "bytes"),
                        ("rocelab_mrc_path_state", "state")):
        for key, value in metrics.get(name, {}).items():
            d = dict(labels_of(key))
            p = paths[(d["node"], d["conn"])].setdefault(
                d["ev"], {"ev": int(d["ev"]), "plane": int(d.get("plane") or 0)})
            p[field] = STATE_CODES.get(int(value), "unknown") if field == "state" else value
    for k, c in conns.items():
        c["paths"] = sorted(paths.get(k, {}).values(), key=lambda p: (p["plane"], p["ev"]))
    return _senders(conns)


def _conn(d: dict[str, str]) -> dict[str, Any]:
    return {"conn": d["conn"], "flow": d.get("flow", ""), "src": d.get("src", ""),
            "dst": d.get("dst", ""), "node": d["node"], "evs_by_state": {}, "paths": []}


def _senders(conns: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """The senders' entries (node == src: each end has its own connection id, and the
    receiver's has no EVs); a flow whose sender does not report keeps its other end's."""
    cs = [c for (_, cid), c in sorted(conns.items()) if c["src"] and cid != FINISHED]
    sending = {c["flow"] for c in cs if c["node"] == c["src"]}
    return [c for c in cs if c["node"] == c["src"] or c["flow"] not in sending]


def resolve_spines(plan: Plan, conns: list[dict[str, Any]]) -> None:
    """Each path's `spine`: the port the source's leaf picks for that EV (None where the
    fabric does not say, or past MAX_LOOKUPS EVs), one batched lookup per plane."""
    budget = MAX_LOOKUPS
    for c in conns:
        try:
            src, dst = plan.node(c["src"]), plan.node(c["dst"])
        except (KeyError, RocelabError):
            continue
        planes: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for p in c["paths"]:
            p["spine"] = None
            if budget > 0:
                planes[p["plane"]].append(p)
                budget -= 1
        for plane, paths in sorted(planes.items()):
            rail = plane if len(src.addresses) > 1 else None
            try:
                found = forwarding.egress_ports(plan, src, dst, [p["ev"] for p in paths], rail=rail)
            except (RocelabError, OSError, IndexError, ValueError):
                continue
            for p, spine in zip(paths, found):
                p["spine"] = spine
