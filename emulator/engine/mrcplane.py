"""The data thread's MRC side: the MRC endpoint, its connections and their telemetry.

The data thread (datathread.py) runs RC QPs and MRC connections in one loop;
this holds what MRC needs there: which connection serves which transfer
(a `Watch`, as for QPs), the longest gap in placed bytes per receiving
connection, and the stats entries of docs/mrc.md "Engine stats" (live
connections one each; finished ones summed per flow).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..roce.mrc_endpoint import MrcEndpoint
from ..roce.mrc_receiver import MrcReceiver
from ..roce.mrc_sender import MrcSender
from ..roce.verbs import WcStatus

IDLE_WAIT_S = 0.005
SUSPECT_S = 60.0  # how long a plane a connection lost stays suspect for the next ones
SENDER_KEYS = ("probes_sent", "probes_answered", "sacks_received", "nacks_received",
               "trim_nacks_received", "retransmitted_packets", "retransmitted_bytes")
RECEIVER_KEYS = ("sacks_sent", "nacks_sent", "trim_nacks_sent")
COUNT_KEYS = ("evs_total", "retirements", *SENDER_KEYS, *RECEIVER_KEYS)
STATES = ("good", "assumed_bad", "denied", "unknown")
FlowKey = tuple[str, str, str]


@dataclass
class _Served:
    half: MrcSender | MrcReceiver
    flow: FlowKey
    watch: Any = None  # datathread.Watch of the transfer a sender serves
    peers: list[str] = field(default_factory=list)  # the peer's address on each plane
    last_placed: int = 0
    last_t: float | None = None
    max_gap_s: float = 0.0

    def progress(self, placed: int, now: float) -> None:
        if placed != self.last_placed:
            if self.last_t is not None:
                self.max_gap_s = max(self.max_gap_s, now - self.last_t)
            self.last_placed, self.last_t = placed, now


@dataclass
class MrcPlane:
    endpoint: MrcEndpoint
    served: dict[int, _Served] = field(default_factory=dict)
    finished: dict[FlowKey, dict[str, Any]] = field(default_factory=dict)
    # peer addresses (one plane's) an earlier sender ended with every EV retired on,
    # and when: a new connection there starts those EVs retired and probes them, as a
    # NIC keeps its path state, instead of losing a window to an ACK timeout
    suspect: dict[str, float] = field(default_factory=dict)

    @property
    def busy(self) -> bool:
        return bool(self.served)

    def add(self, conn: int, half: MrcSender | MrcReceiver, local_ips: list[str],
            peer_ips: list[str], flow: FlowKey, watch: Any = None) -> None:
        """(data thread) Serve a connection's half; a sender's completions feed `watch`."""
        self.served[conn] = _Served(half, flow, watch, peers=list(peer_ips))
        if isinstance(half, MrcSender) and len(peer_ips) > 1:
            now = time.monotonic()
            for plane, ip in enumerate(peer_ips):
                if now - self.suspect.get(ip, -SUSPECT_S) < SUSPECT_S:
                    half.evs.retire_plane(plane, now)
        self.endpoint.add(conn, half, local_ips, peer_ips)

    def remove(self, conn: int) -> dict[str, Any] | None:
        """(data thread) Stop serving; its stats entry (with `max_gap_s`), summed into
        its flow's finished entry."""
        s = self.served.pop(conn, None)
        self.endpoint.remove(conn)
        if s is None:
            return None
        if isinstance(s.half, MrcSender) and len(s.peers) > 1:
            for plane, ip in enumerate(s.peers):
                if s.half.evs.plane_down(plane):
                    self.suspect[ip] = time.monotonic()
                else:
                    self.suspect.pop(ip, None)
        entry = entry_of(conn, s.half, s.flow) | {"max_gap_s": round(s.max_gap_s, 6)}
        add_into(self.finished.setdefault(s.flow, empty_entry(s.flow)), entry)
        return entry

    def turn(self, others_busy: bool) -> None:
        """(data thread) One MRC turn; blocks (up to IDLE_WAIT_S) only if nothing moved
        and RC has nothing to do either."""
        now = time.monotonic()
        moved = self.endpoint.step(now)
        if not moved and not others_busy:
            due = self.endpoint.next_deadline()
            wait = IDLE_WAIT_S if due is None else min(IDLE_WAIT_S, due - now)
            self.endpoint.wait(wait)
        self.dispatch(time.monotonic())

    def dispatch(self, now: float) -> None:
        for s in self.served.values():
            half = s.half
            if isinstance(half, MrcReceiver):
                s.progress(half.counters.bytes_placed, now)
                continue
            s.progress(half.counters.bytes_sent, now)
            if s.watch is None:
                continue
            for wr_id, ok in half.completions():
                s.watch.complete(wr_id, WcStatus.SUCCESS if ok else WcStatus.RETRY_EXCEEDED)
            if half.error and not s.watch.done.is_set():
                s.watch.fail(half.error)

    def stats(self) -> list[dict[str, Any]]:
        """(data thread) Contract 3: every live connection, then each flow's finished ones."""
        live = [entry_of(c, s.half, s.flow) for c, s in self.served.items()]
        return live + [dict(e) for e in self.finished.values()]


def empty_entry(flow: FlowKey) -> dict[str, Any]:
    return {"conn": "finished", "flow": flow[0], "src": flow[1], "dst": flow[2],
            **{k: 0 for k in COUNT_KEYS}, "evs_by_state": {s: 0 for s in STATES},
            "cwnd_bytes": 0, "paths": []}


def entry_of(conn: int, half: MrcSender | MrcReceiver, flow: FlowKey) -> dict[str, Any]:
    """One connection's stats entry (docs/mrc.md "Engine stats"); a receiver has no EVs
    of its own: its EV counts are 0 and its paths empty."""
    e = empty_entry(flow) | {"conn": f"{conn:#x}"}
    if isinstance(half, MrcSender):
        st = half.stats()
        e |= {k: st[k] for k in SENDER_KEYS} | {
            "evs_total": st["evs_total"], "retirements": st["retirements"],
            "evs_by_state": st["evs_by_state"], "cwnd_bytes": st["cwnd_bytes"],
            "paths": st["paths"]}
    else:
        counts = half.stats()
        e |= {k: counts[k] for k in RECEIVER_KEYS}
    return e


def add_into(total: dict[str, Any], entry: dict[str, Any]) -> None:
    """Sum `entry`'s counters into `total` (finished connections of one flow)."""
    for k in COUNT_KEYS:
        total[k] += entry[k]
    for s in STATES:
        total["evs_by_state"][s] += entry["evs_by_state"][s]
