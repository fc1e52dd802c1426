"""The engine's MRC connections: the `stats` reply's "mrc" list as series.

One entry per MRC connection (docs/mrc.md; live ones and finished ones summed,
like QPs). Per connection (labels `node`, `conn`, `flow`, `src`, `dst`): its
EVs by state, retirements, probes, SACK/NACK/TRIM-NACK counts, resends and the
congestion window; per path (labels `node`, `conn`, `flow`, `ev`, `plane`): the
bytes and packets sprayed on that EV, its retirements and its state as a code
(`PATH_STATE`). An engine without MRC (or from before it) adds nothing.
"""

from __future__ import annotations

from typing import Any

from ..model import Families, Kind, Labels

C, G = Kind.COUNTER, Kind.GAUGE
EV_STATES = ("good", "assumed_bad", "denied", "unknown")
PATH_STATE = {"unknown": 0, "good": 1, "assumed_bad": 2, "denied": 3}  # rocelab_mrc_path_state
CONN_COUNTERS = {  # stats field -> (metric, help)
    "retirements": ("rocelab_mrc_ev_retirements_total",
                    "EVs retired (set ASSUMED_BAD) on a loss, NACK or timeout."),
    "probes_sent": ("rocelab_mrc_probes_sent_total", "EV probes sent."),
    "probes_answered": ("rocelab_mrc_probes_answered_total", "EV probes answered."),
    "sacks_sent": ("rocelab_mrc_sacks_sent_total", "SACKs sent."),
    "sacks_received": ("rocelab_mrc_sacks_received_total", "SACKs received."),
    "nacks_sent": ("rocelab_mrc_nacks_sent_total", "NACKs sent (TRIM NACKs included)."),
    "nacks_received": ("rocelab_mrc_nacks_received_total", "NACKs received (TRIM NACKs included)."),
    "trim_nacks_sent": ("rocelab_mrc_trim_nacks_sent_total",
                        "TRIM NACKs sent (answers to trimmed packets)."),
    "trim_nacks_received": ("rocelab_mrc_trim_nacks_received_total",
                            "TRIM NACKs received (each resends exactly one packet)."),
    "retransmitted_packets": ("rocelab_mrc_retransmitted_packets_total",
                              "Packets sent again (selective: lost or trimmed ones only)."),
    "retransmitted_bytes": ("rocelab_mrc_retransmitted_bytes_total", "Payload bytes sent again."),
}
PATH_COUNTERS = {
    "bytes": ("rocelab_mrc_path_bytes_total", "Payload bytes sprayed on this EV (path)."),
    "packets": ("rocelab_mrc_path_packets_total", "Packets sprayed on this EV (path)."),
    "retirements": ("rocelab_mrc_path_retirements_total", "Times this EV was retired."),
}


def parse(fams: Families, host: str, conns: list[dict[str, Any]]) -> None:
    """Every MRC connection of one host's stats reply."""
    fams.add(G, "rocelab_mrc_connections", "MRC connections the engine reports.", len(conns),
             fams.labels(node=host))
    for conn in conns:
        cid = str(conn.get("conn", "?"))
        labels = fams.labels(node=host, conn=cid, flow=str(conn.get("flow", "")),
                             src=str(conn.get("src", "")), dst=str(conn.get("dst", "")))
        _conn(fams, labels, conn)
        for path in conn.get("paths") or []:
            _path(fams, fams.labels(node=host, conn=cid, flow=labels["flow"],
                                    ev=str(path.get("ev", "?")),
                                    plane=str(path.get("plane", 0))), path)


def _conn(fams: Families, labels: Labels, conn: dict[str, Any]) -> None:
    by_state = conn.get("evs_by_state") or {}
    for state in EV_STATES:
        fams.add(G, "rocelab_mrc_evs", "EVs of the connection in each state.",
                 by_state.get(state, 0), labels | {"state": state})
    fams.add(G, "rocelab_mrc_evs_configured", "EVs the connection sprays over (its EV set).",
             conn.get("evs_total", sum(by_state.get(s, 0) for s in EV_STATES)), labels)
    for field, (metric, help_) in CONN_COUNTERS.items():
        fams.add(C, metric, help_, conn.get(field, 0), labels)
    if "cwnd_bytes" in conn:
        fams.add(G, "rocelab_mrc_cwnd_bytes", "Congestion window (NSCC), bytes.",
                 conn["cwnd_bytes"], labels)


def _path(fams: Families, labels: Labels, path: dict[str, Any]) -> None:
    for field, (metric, help_) in PATH_COUNTERS.items():
        fams.add(C, metric, help_, path.get(field, 0), labels)
    state = str(path.get("state", "unknown")).lower()
    fams.add(G, "rocelab_mrc_path_state",
             "The EV's state: 1 good, 2 assumed_bad (retired), 3 denied, 0 unknown.",
             PATH_STATE.get(state, 0), labels)
