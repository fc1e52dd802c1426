"""An RC transfer's two sides in the engine (docs/roce.md): the initiator posts the
ops on its QPs, the peer's QPs respond into (or out of) its registered region.

The control exchange is TCP 18515, JSON lines (`accept`, `accepted`, `finish`,
`finished`), as perftest's: the initiator sends its QPNs and PSNs, the peer answers
with its own, its region's VA and rkey; the data then moves as RoCEv2 on UDP 4791
over the QPs of each engine's data thread. `engine` is the `daemon.Engine` of this
host (its QPNs, QPs and data thread); `mrc.py` is the same for an MRC connection.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import EngineError
from ..roce.endpoint import qp_sport
from ..roce.memory import MemoryRegion
from ..roce.rc import QueuePair
from .datathread import FlowKey, Watch
from .descriptors import QPS_PER_NIC, SQ_DEPTH, Feeder, qp_of
from .job import SUM_KEYS, Job, Op, digest, flow_of, source_bytes, source_digest
from .jsonlines import Channel

PROGRESS_EVERY_S = 0.25


@dataclass(frozen=True)
class Timing:
    """A transfer's moments (time.monotonic): set-up began, the data began, the data ended."""

    setup: float
    start: float
    end: float

    @property
    def data_s(self) -> float:
        return self.end - self.start

    @property
    def setup_s(self) -> float:
        return self.start - self.setup

    @property
    def handoff_s(self) -> float:
        """From asking for the transfer to holding its data."""
        return self.end - self.setup


def initiate(engine: Any, job: Job, peer_ip: str, cli: Channel,
             connect: Callable[[str], socket.socket]) -> dict[str, Any]:
    """Requester side: WRITE pushes our source, READ pulls the peer's; `connect` opens
    the control connection to the peer's engine."""
    if job.stripe:  # Mooncake: 2 QPs per NIC, QP i on rail i mod NICs
        job = replace(job, qps=QPS_PER_NIC * len(engine.ips))
    dp = engine.dp
    segments = job.segments()
    holds_source = job.op is Op.WRITE
    buf = source_bytes(job) if holds_source else bytearray(job.region_bytes)
    mr = dp.call(lambda: dp.memory.register(buf))
    local = engine.new_qpns(job.qps)
    qpns = [q["qpn"] for q in local]
    t_setup, feed = time.monotonic(), None
    try:
        with Channel(connect(peer_ip)) as peer:
            peer.send({"cmd": "accept", "job": job.to_json(), "qps": local, "ip": engine.ip,
                       "ips": engine.ips})
            reply = peer.recv()
            if reply.get("event") == "error":
                raise EngineError(f"peer {peer_ip}: {reply['error']}")
            qps = engine.new_qps(job, local, reply["qps"])
            watch = Watch(len(segments), {i: s.length for i, s in enumerate(segments)})
            t0 = time.monotonic()
            peer_ips = reply.get("ips") or [peer_ip]
            flow = flow_of(job, engine.host, peer_ip, initiator=True)
            feed = dp.call(lambda: _post(engine, job, qps, segments, buf,
                                         reply | {"ips": peer_ips}, watch, flow))
            _wait(job, qps, watch, cli, t0)
            t1 = time.monotonic()
            counters = dp.call(lambda: dp.remove(qpns))
            peer.send({"cmd": "finish"})
            fin = peer.recv()
    finally:  # a failed transfer must not leave QPs or memory behind
        dp.call(lambda: _release(engine, qpns, mr, feed))
    mine = source_digest(job, buf, segments) if holds_source else digest(buf, segments, "dst")
    timing = Timing(t_setup, t0, t1)
    dp.call(lambda: engine._finished(flow, timing.data_s, timing.handoff_s))
    return _result(engine.ips, job, qps, counters, fin, mine, watch, timing)


def _release(engine: Any, qpns: list[int], mr: MemoryRegion,
             feed: Callable[[float], None] | None = None) -> None:
    """Remove a transfer's QPs and deregister its memory (on the data thread); stop
    `feed`ing its ops."""
    dp = engine.dp
    if feed in dp.tickers:
        dp.tickers.remove(feed)
    dp.remove(qpns)
    dp.memory.deregister(mr)


def _post(engine: Any, job: Job, qps: Sequence[QueuePair], segments, buf: bytearray,
          peer: dict[str, Any], watch: Watch, flow: FlowKey) -> Callable[[float], None] | None:
    """(data thread) Serve the QPs and post the ops, batch by batch when `job.piece` is
    set (descriptors.Feeder); return the ticker still posting (None: all posted). `peer`:
    its `accepted` reply (va, rkey, ips)."""
    dp, ips, peer_ips = engine.dp, engine.ips, peer["ips"]
    view = memoryview(buf)
    va, rkey = peer["va"], peer["rkey"]
    for i, qp in enumerate(qps):  # QP i on rail i: NIC i mod NICs at each end
        dp.add(qp, peer_ips[i % len(peer_ips)], watch, ips[i % len(ips)], flow)

    def post(i: int, q: int) -> None:  # messages round-robin over QPs: per-QP ECMP entropy
        s, qp = segments[i], qps[q]
        if job.op is Op.WRITE:
            qp.post_write(i, view[s.src_offset:s.src_offset + s.length], va + s.dst_offset, rkey)
        else:
            qp.post_read(i, view[s.dst_offset:s.dst_offset + s.length], va + s.src_offset, rkey)

    rails = len(ips)
    feeder = Feeder(len(segments), len(qps), post,
                    lambda i: qp_of(i, len(qps), rails, job.stripe), lambda: watch.completed,
                    depth=SQ_DEPTH if job.piece else len(segments))  # whole messages: all at once
    dp.flows[flow].work_requests += len(segments)
    feeder.tick()
    if feeder.finished:
        return None
    dp.tickers.append(feeder.tick)
    return feeder.tick  # _release takes it off the tickers


def _wait(job: Job, qps: Sequence[QueuePair], watch: Watch, cli: Channel, t0: float) -> None:
    deadline = t0 + job.timeout_s
    every = float(job.extra.get("progress_s", PROGRESS_EVERY_S))
    while not watch.done.wait(every):
        # Payload bytes put on the wire (retransmissions included): read without
        # the data thread's help, since ints only grow and a stale one is harmless.
        sent = sum(q.counters.bytes_sent for q in qps)
        cli.send({"event": "progress", "bytes": watch.bytes_done, "sent": sent,
                  "total": job.payload_bytes})
        if time.monotonic() > deadline:
            watch.fail(f"not finished within {job.timeout_s:.0f} s")
    if watch.error:
        raise EngineError(f"transfer failed: {watch.error}")


def _result(ips: list[str], job: Job, qps, counters, fin, mine, watch,
            timing: Timing) -> dict[str, Any]:
    ours = list(counters.values())
    theirs = list(fin.get("counters", {}).values())
    total = {k: sum(c.get(k, 0) for c in ours + theirs) for k in SUM_KEYS}
    receivers = theirs if job.op is Op.WRITE else ours  # where the data lands
    interruption = max((c.get("max_rx_gap_s", 0.0) for c in receivers), default=0.0)
    dur = max(timing.data_s, 1e-9)
    return {
        "op": job.op.value, "bytes": job.payload_bytes, "duration_s": round(dur, 6),
        "setup_s": round(timing.setup_s, 6), "handoff_s": round(timing.handoff_s, 6),
        "goodput_gbps": round(job.payload_bytes * 8 / dur / 1e9, 4),
        "messages": watch.expected, "integrity_ok": mine == fin.get("digest"),
        "digest": mine, "interruption_s": interruption, **total, "transport": "rc",
        "longest_interruption_s": interruption, "failed": False, "error": None,
        "qps": [{"qpn": q.qpn, "remote_qpn": q.config.remote_qpn,
                 "udp_sport": qp_sport(q.config), "local_ip": ips[i % len(ips)],
                 "dcqcn": counters[q.qpn].get("dcqcn"),  # None: DCQCN off on this QP
                 **{k: counters[q.qpn].get(k, 0) for k in SUM_KEYS}} for i, q in enumerate(qps)],
    }


def respond(engine: Any, ch: Channel, msg: dict[str, Any], job: Job) -> None:
    """Responder side: register the region, create QPs, wait for `finish`."""
    dp, ips = engine.dp, engine.ips
    holds_source = job.op is Op.READ
    buf = source_bytes(job) if holds_source else bytearray(job.region_bytes)
    mr = dp.call(lambda: dp.memory.register(buf))
    local = engine.new_qpns(job.qps)
    qps = engine.new_qps(job, local, msg["qps"])
    peer_ips = msg.get("ips") or [msg["ip"]]
    flow = flow_of(job, engine.host, msg["ip"], initiator=False)

    def add_all() -> None:
        for i, qp in enumerate(qps):
            dp.add(qp, peer_ips[i % len(peer_ips)], None, ips[i % len(ips)], flow)

    dp.call(add_all)
    try:
        ch.send({"event": "accepted", "qps": local, "va": mr.va, "rkey": mr.rkey, "ips": ips})
        fin = ch.recv()
    finally:
        counters = dp.call(lambda: dp.remove([q.qpn for q in qps]))
        dp.call(lambda: dp.memory.deregister(mr))
    if fin.get("cmd") == "finish":
        segments = job.segments()
        mine = source_digest(job, buf, segments) if holds_source else digest(buf, segments, "dst")
        ch.send({"event": "finished", "digest": mine,
                 "counters": {str(k): v for k, v in counters.items()}})
