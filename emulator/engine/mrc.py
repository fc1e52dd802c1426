"""An MRC transfer's two sides in the engine (docs/mrc.md): the initiator sends, the
peer places.

The control exchange is the RC one (TCP 18515, JSON lines: `accept`, `accepted`,
`finish`, `finished`) carrying connection ids instead of QPNs; the data then
moves as MRC datagrams (mrc_wire) over the endpoint of each engine's data thread.
The initiator's connection is an `MrcSender` (EV set, NSCC), the peer's an
`MrcReceiver` placing into the registered region.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

from ..errors import EngineError
from ..roce.mrc_ev import EvSet, entropy_values
from ..roce.mrc_receiver import MrcReceiver
from ..roce.mrc_sender import MrcSender, SenderConfig
from ..roce.nscc import Nscc, NsccParams
from .config import EngineConfig
from .datathread import DataPlane, Watch
from .job import Job, digest, flow_of, source_bytes, source_digest
from .jsonlines import Channel

PROGRESS_EVERY_S = 0.25
BASE_RTT_REAL_S = 10e-6  # NSCC's base RTT on a shaped lab, real-equivalent
BASE_RTT_UNSHAPED_S = 200e-6  # ... and on an unshaped one (wall: a Python engine's turn)
# NSCC's window on a shaped lab, in bandwidth-delay products of the host link at the
# modelled base RTT: with RC's 2048-MTU window an MRC sender queued up to 15 MB in its
# own NIC's qdisc (1.2 s at 100 Mbit/s), where neither ECN nor trimming sees it,
# and its packets waited there until ACK timeouts resent them (measured)
BDP_WINDOWS = 3.0
# packets per SACK (ACK_REQ and the receiver's count) on an unshaped lab, where the
# engines' CPUs are the bottleneck and each SACK costs the sender a datagram and a turn
# of Python (a shaped lab keeps 16: NSCC's feedback there is what the comparisons measure)
ACK_EVERY_UNSHAPED, ACK_EVERY_SHAPED = 32, 16


def ack_every(config: EngineConfig) -> int:
    return ACK_EVERY_SHAPED if config.line_rate_bps else ACK_EVERY_UNSHAPED


def sender(job: Job, conn: int, remote: int, planes: int, config: EngineConfig) -> MrcSender:
    """The initiator's half: `job.evs` EVs per plane, NSCC, timers under dilation."""
    d = config.dilation
    ack = 1.024e-6 * (1 << config.mrc_ack_exp) * d
    if config.line_rate_bps:  # a shaped lab: queues hold packets for wall seconds (as RC's RTO)
        ack = max(ack, 1.0)
    evs = EvSet(entropy_values(conn << 24 | remote, job.evs, planes),
                max(1, job.evs * planes // 4), probe_interval_s=ack)
    rtt = BASE_RTT_REAL_S * d if config.line_rate_bps else BASE_RTT_UNSHAPED_S
    window = config.window * job.mtu  # RC's per-QP window: the same bytes in flight
    if config.line_rate_bps:  # ... but not past the NIC: a few BDPs of the modelled RTT
        window = min(window, max(16 * job.mtu, int(BDP_WINDOWS * config.line_rate_bps / 8 * rtt)))
    cc = Nscc(NsccParams(job.mtu, base_rtt_s=rtt, target_s=rtt, max_cwnd=window,
                         init_cwnd=window), time.monotonic())
    return MrcSender(conn, remote, evs, cc,
                     SenderConfig(mtu=job.mtu, ack_timeout_s=ack, rate_bps=job.rate_bps,
                                  ack_every=ack_every(config)))


def initiate(engine: Any, job: Job, peer_ip: str, cli: Channel,
             peer: socket.socket) -> dict[str, Any]:
    """The sending side of one MRC transfer; the result of contract 4 (failed, not raised,
    when the connection gives up or the deadline passes)."""
    dp: DataPlane = engine.dp
    segments = job.segments()
    buf = source_bytes(job)
    conn = engine.new_qpns(1)[0]["qpn"]
    flow = flow_of(job, engine.host, peer_ip, initiator=True)
    t_setup = time.monotonic()
    with Channel(peer) as ch:
        ch.send({"cmd": "accept", "job": job.to_json(), "qps": [], "ip": engine.ip,
                 "ips": engine.ips, "mrc": {"conn": conn}})
        reply = ch.recv()
        if reply.get("event") == "error":
            raise EngineError(f"peer {peer_ip}: {reply['error']}")
        peer_ips = reply.get("ips") or [peer_ip]
        planes = min(len(engine.ips), len(peer_ips))
        half = sender(job, conn, reply["conn"], planes, engine.config)
        watch = Watch(len(segments), {i: s.length for i, s in enumerate(segments)})
        view, va, rkey = memoryview(buf), reply["va"], reply["rkey"]

        def post() -> None:
            dp.mrc.add(conn, half, engine.ips[:planes], peer_ips[:planes], flow, watch)
            for i, s in enumerate(segments):
                half.post_write(i, view[s.src_offset:s.src_offset + s.length],
                                va + s.dst_offset, rkey)

        t0 = time.monotonic()
        try:
            dp.call(post)
            _wait(job, half, watch, cli, t0)
        finally:
            t1 = time.monotonic()
            mine = dp.call(lambda: dp.mrc.remove(conn)) or {}
        ch.send({"cmd": "finish"})
        fin = ch.recv()
    dp.call(lambda: engine._finished(flow, t1 - t0, t1 - t_setup))
    mine |= {"timeouts": half.counters.timeouts, "packets_sent": half.counters.packets_sent}
    return result(job, watch, mine, fin, source_digest(job, buf, segments),
                  (t_setup, t0, t1))


def _wait(job: Job, half: MrcSender, watch: Watch, cli: Channel, t0: float) -> None:
    every = float(job.extra.get("progress_s", PROGRESS_EVERY_S))
    while not watch.done.wait(every):
        cli.send({"event": "progress", "bytes": watch.bytes_done,
                  "sent": half.counters.bytes_sent, "total": job.payload_bytes})
        if time.monotonic() > t0 + job.timeout_s:
            watch.fail(f"not finished within {job.timeout_s:.0f} s")


def result(job: Job, watch: Watch, mine: dict[str, Any], fin: dict[str, Any], digest_: str,
           times: tuple[float, float, float]) -> dict[str, Any]:
    """Contract 4: RC's keys (summed over both ends' halves), `transport`, the longest
    interruption (the receiver's longest gap in placed bytes), failed/error, `mrc`."""
    theirs = fin.get("mrc") or {}
    entry = dict(mine)
    for k in ("sacks_sent", "nacks_sent", "trim_nacks_sent"):
        entry[k] = entry.get(k, 0) + theirs.get(k, 0)
    gap = float(theirs.get("max_gap_s", 0.0))
    for k in ("max_gap_s", "timeouts", "packets_sent"):
        entry.pop(k, None)
    setup, t0, t1 = times
    dur = max(t1 - t0, 1e-9)
    return {
        "op": job.op.value, "transport": "mrc", "bytes": job.payload_bytes,
        "duration_s": round(dur, 6), "setup_s": round(t0 - setup, 6),
        "handoff_s": round(t1 - setup, 6),
        "goodput_gbps": round(job.payload_bytes * 8 / dur / 1e9, 4),
        "messages": watch.expected, "integrity_ok": digest_ == fin.get("digest"),
        "digest": digest_, "interruption_s": gap, "longest_interruption_s": gap,
        "failed": watch.error is not None, "error": watch.error,
        "retransmitted_packets": entry.get("retransmitted_packets", 0),
        "naks_rx": entry.get("nacks_received", 0), "naks_tx": entry.get("nacks_sent", 0),
        "timeouts": mine.get("timeouts", 0), "bad_icrc": 0, "access_errors": 0,
        "duplicates": theirs.get("duplicates", 0),
        "packets_sent": mine.get("packets_sent", 0), "cnps_rx": 0, "cnps_tx": 0,
        "qps": [], "mrc": entry,
    }


def respond(engine: Any, ch: Channel, msg: dict[str, Any], job: Job,
            release: Callable[[], None] | None = None) -> None:
    """The placing side: register the region, serve a receiver until `finish`."""
    dp: DataPlane = engine.dp
    buf = bytearray(job.region_bytes)
    mr = dp.call(lambda: dp.memory.register(buf))
    conn = engine.new_qpns(1)[0]["qpn"]
    remote = int(msg["mrc"]["conn"])
    peer_ips = msg.get("ips") or [msg["ip"]]
    planes = min(len(engine.ips), len(peer_ips))
    half = MrcReceiver(conn, remote, dp.memory, ack_every(engine.config))
    flow = flow_of(job, engine.host, msg["ip"], initiator=False)
    dp.call(lambda: dp.mrc.add(conn, half, engine.ips[:planes], peer_ips[:planes], flow))
    try:
        ch.send({"event": "accepted", "conn": conn, "qps": [], "va": mr.va, "rkey": mr.rkey,
                 "ips": engine.ips})
        fin = ch.recv()
    finally:
        entry = dp.call(lambda: dp.mrc.remove(conn)) or {}
        dp.call(lambda: dp.memory.deregister(mr))
    if fin.get("cmd") == "finish":
        entry["duplicates"] = half.counters.duplicates
        ch.send({"event": "finished", "digest": digest(buf, job.segments(), "dst"),
                 "counters": {}, "mrc": entry})
