"""The engine process: one per host namespace, serving every QP of that host.

    python -m emulator.engine.daemon --lab L --host prefill1 --ip 10.2.0.1 --sock PATH

Control, as perftest does it: the side that initiates a transfer connects
over TCP to the peer engine's port 18515 and exchanges QPNs, PSNs, rkey and
VA; the data then moves as RoCEv2 on UDP 4791. The CLI talks to each engine
over a unix socket in the lab's run dir (`transfer`, `stats`, `ping`, `prepare`: make a
coming transfer's test data ahead of it).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import EngineError, RocelabError
from ..histogram import TRANSFER_BUCKETS, Histogram
from ..perftest.session import Options
from ..roce import wire
from ..roce.dcqcn import CHOICES, ReactionPoint
from ..roce.endpoint import qp_sport
from ..roce.memory import MemoryRegion
from ..roce.rc import QueuePair
from ..roce.verbs import MAX_RD_ATOMIC, QpConfig
from ..rundirs import PRIVATE_UMASK
from . import mrc
from .config import EngineConfig
from .datathread import DataPlane, FlowKey, Watch, reductions
from .descriptors import QPS_PER_NIC, SQ_DEPTH, Feeder, qp_of
from .job import CONTROL_PORT, SUM_KEYS, Job, Op, digest, flow_of, prepare_source, source_bytes, source_digest
from .jsonlines import Channel
from .paced import PacedQueuePair
from .perftest import PerftestJobs, is_engine_peer
from .regions import Regions

log = logging.getLogger("rocelab.engine")
PROGRESS_EVERY_S = 0.25
# Outstanding READs: the initiator depth (ORD) and the responder's resources (IRD),
# as rxe has them; the exchange carries IRD, ORD = min(own, peer's IRD).
ORD = IRD = MAX_RD_ATOMIC
CONNECT_TIMEOUT_S = 10.0
PEER_REPLY_S = 60.0  # a peer's reply may wait out a repair: BGP's 9 s hold + TCP's backoff


ACK_TIMEOUT_BACKOFF = 16  # a flow's ack_timeout doubles per retry up to this many times it


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


class Engine:
    def __init__(self, lab: str, host: str, ip: str, sock_path: Path, config: EngineConfig,
                 rail_ips: tuple[str, ...] = ()):
        self.lab, self.host, self.ip, self.sock_path = lab, host, ip, sock_path
        self.ips = [ip, *rail_ips]  # QP i sends from ips[i % len(ips)]: rail i mod NICs
        self.config = config
        self.profile = config.profile()
        self.dp = DataPlane(ip, dscp=config.dscp, key_seed=sum(socket.inet_aton(ip)) & 0xFF,
                            rail_ips=rail_ips, mrc_dscp=config.mrc_dscp)
        self._qpn = random.Random(ip).randrange(0x100, 0x1000)
        self._lock = threading.Lock()
        self.transfers_done = 0
        # transfers this engine initiated and finished, since it started (telemetry)
        self.histograms = {"transfer_duration_seconds": Histogram.empty(TRANSFER_BUCKETS),
                           "kv_handoff_seconds": Histogram.empty(TRANSFER_BUCKETS)}
        self.perftest = PerftestJobs(self)
        self.regions = Regions(config.max_registered_bytes)  # what peers may make us hold

    def new_qpns(self, n: int) -> list[dict[str, int]]:
        with self._lock:
            base, self._qpn = self._qpn, self._qpn + n
        # "ird": the READs this side's responder remembers; the peer's ORD stays within it
        return [{"qpn": base + i, "psn": random.randrange(1 << 24), "ird": IRD}
                for i in range(n)]

    def qp_config(self, job: Job, local: dict[str, int], remote: dict[str, int],
                  index: int) -> QpConfig:
        c = self.config
        return QpConfig(qpn=local["qpn"], remote_qpn=remote["qpn"], send_psn=local["psn"],
                        recv_psn=remote["psn"], mtu=job.mtu, rto=job.ack_timeout_s or c.rto,
                        rto_max=max(c.rto_max, ACK_TIMEOUT_BACKOFF * job.ack_timeout_s),
                        window=c.window, cnp_interval=self.cnp_interval,
                        udp_sport=job.udp_sports[index] if job.udp_sports else 0,
                        max_rd_atomic=min(ORD, remote.get("ird", ORD)), max_dest_rd_atomic=IRD)

    @property
    def cnp_interval(self) -> float:
        base = self.config.profile(self.config.dcqcn or "nvidia")
        return base.cnp_interval if base else 50e-6

    def new_qps(self, job: Job, local: list[dict[str, int]],
                remote: list[dict[str, int]]) -> list[PacedQueuePair]:
        return [self._paced(self.qp_config(job, mine, r, i), job.rate_bps / job.qps)
                for i, (mine, r) in enumerate(zip(local, remote))]

    def _paced(self, cfg: QpConfig, rate_bps: float) -> PacedQueuePair:
        """A QP under this host's DCQCN profile (if on), limited to rate_bps (0: none)."""
        rp = (ReactionPoint(self.profile, self.config.line_rate_bps, time.monotonic())
              if self.profile else None)
        return PacedQueuePair(cfg, self.dp.memory, rp, rate_bps)

    # -- a perftest session's QPs (perftest.session.QueuePairs) ------------------

    def register(self, buf: bytearray) -> MemoryRegion:
        return self.dp.call(lambda: self.dp.memory.register(buf))

    def deregister(self, mr: MemoryRegion) -> None:
        self.dp.call(lambda: self.dp.memory.deregister(mr))

    def open_qp(self, cfg: QpConfig, peer_ip: str, rate_bps: float, flow: FlowKey) -> QueuePair:
        c = self.config
        qp = self._paced(replace(cfg, window=c.window, rto=c.rto, rto_max=c.rto_max,
                                 cnp_interval=self.cnp_interval), rate_bps)
        self.dp.call(lambda: self.dp.add(qp, peer_ip, None, self.ip, flow))
        return qp

    def close_qps(self, qpns: list[int]) -> None:
        self.dp.call(lambda: self.dp.remove(qpns))

    @contextlib.contextmanager
    def ticking(self, tick: Callable[[float], None]) -> Iterator[None]:
        self.dp.call(lambda: self.dp.tickers.append(tick))
        try:
            yield
        finally:
            self.dp.call(lambda: self.dp.tickers.remove(tick))

    def set_profile(self, name: str) -> dict[str, Any]:
        """(data thread) Switch DCQCN for this host's current and future QPs."""
        if name not in CHOICES:
            raise EngineError(f"DCQCN profile {name!r}: must be one of {', '.join(CHOICES)}")
        self.profile = self.config.profile(name)
        now = time.monotonic()
        for qp in self.dp.qps.values():
            if isinstance(qp, PacedQueuePair):
                qp.set_reaction_point(ReactionPoint(self.profile, self.config.line_rate_bps, now)
                                      if self.profile else None)
        return {"profile": name, "qps": len(self.dp.qps)}

    # -- serving -------------------------------------------------------------

    def serve(self) -> None:
        self.dp.start()
        tcp = socket.create_server((self.ip, CONTROL_PORT), reuse_port=False)
        self.sock_path.unlink(missing_ok=True)
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        bind_private(unix, self.sock_path)
        unix.listen(64)
        for listener, handler in ((tcp, self._on_tcp), (unix, self._on_unix)):
            threading.Thread(target=self._accept_loop, args=(listener, handler), daemon=True).start()
        log.info("engine %s on %s ready (%s data path)", self.host, self.ip, wire.name())
        signal.sigwait({signal.SIGTERM, signal.SIGINT})
        self.dp.stop()

    def _accept_loop(self, listener: socket.socket, handler) -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=handler, args=(conn,), daemon=True).start()

    def _on_unix(self, conn: socket.socket) -> None:
        self._guarded(self.on_cli, conn)

    def _on_tcp(self, conn: socket.socket) -> None:
        """18515 carries two protocols: an engine's JSON and perftest's exchange."""
        kind = is_engine_peer(conn)
        if kind is None:
            conn.close()
        elif kind:
            conn.settimeout(None)
            self._guarded(self.on_peer, conn)
        else:
            self.perftest.serve_client(conn)

    def _guarded(self, handler, conn: socket.socket) -> None:
        with Channel(conn) as ch:
            try:
                handler(ch)
            except Exception as e:  # every request gets an answer, a bug included
                if not isinstance(e, (RocelabError, OSError)):
                    log.exception("%s failed", handler.__name__)
                log.warning("%s: %s", handler.__name__, e)
                try:
                    ch.send({"event": "error", "error": str(e) or type(e).__name__})
                except OSError:
                    pass

    def on_cli(self, ch: Channel) -> None:
        msg = ch.recv()
        cmd = msg.get("cmd")
        if cmd == "ping":
            ch.send({"event": "pong", "host": self.host, "pid": os.getpid()})
        elif cmd == "stats":
            ch.send({"event": "stats", **self.dp.call(self.stats)})
        elif cmd == "dcqcn":
            ch.send({"event": "dcqcn", **self.dp.call(lambda: self.set_profile(msg["profile"]))})
        elif cmd == "perftest":
            ch.send({"event": "result", **self._perftest(msg, ch)})
        elif cmd == "transfer":
            ch.send({"event": "result", **self.initiate(Job.from_json(msg["job"]),
                                                        msg["peer_ip"], ch)})
        elif cmd == "prepare":  # a coming transfer's test data, made before it is timed
            ch.send({"event": "prepared", "cached": prepare_source(Job.from_json(msg["job"]))})
        else:
            raise EngineError(f"unknown command {cmd!r}")

    def _perftest(self, msg: dict[str, Any], ch: Channel) -> dict[str, Any]:
        opts = Options.from_json(msg["opts"])
        if msg.get("role") == "server":  # tell the CLI once armed, then wait for a client
            res = self.perftest.server(opts, float(msg.get("timeout_s", 600)),
                                       ready=lambda: ch.send({"event": "armed"}))
            if "error" in res:
                raise EngineError(res["error"])
            return res
        return self.perftest.client(opts, msg["peer_ip"])

    def stats(self) -> dict[str, Any]:
        """(data thread) Counters of every live QP and of the transport; each flow's
        totals, the histograms of finished transfers (docs/telemetry.md)."""
        return {"qps": {q: qp.counters.as_dict() | {"dcqcn": getattr(qp, "dcqcn_state", None)}
                        for q, qp in self.dp.qps.items()},
                "transport": self.dp.transport.counters.as_dict(),
                "transfers_done": self.transfers_done,
                "retired": dict(self.dp.retired), "transfers": self._transfers(),
                "dcqcn_reductions": self.dp.retired_reductions + sum(
                    reductions(qp) for qp in self.dp.qps.values()),
                "qp_flows": {q: list(key) for q, key in self.dp.qp_flow.items()},
                "flows": self._flows(), "mrc": self.dp.mrc.stats(),
                "mrc_transport": self.dp.mrc.endpoint.counters.as_dict(),
                "histograms": {k: h.to_json() for k, h in self.histograms.items()}}

    def _flows(self) -> list[dict[str, Any]]:
        """(data thread) Every flow's counters summed over its QPs, finished and live."""
        totals = {key: dict(f.retired) for key, f in self.dp.flows.items()}
        for qpn, key in self.dp.qp_flow.items():
            qp, sums = self.dp.qps.get(qpn), totals[key]
            if qp is None:
                continue
            for k, v in qp.counters.as_dict().items():
                sums[k] = sums.get(k, 0) + v
            sums["dcqcn_reductions"] = sums.get("dcqcn_reductions", 0) + reductions(qp)
        return [{"flow": key[0], "src": key[1], "dst": key[2],
                 "transfers": self.dp.flows[key].transfers,
                 "work_requests": self.dp.flows[key].work_requests, "counters": totals[key]}
                for key in sorted(totals)]

    def _finished(self, flow: FlowKey, duration_s: float, handoff_s: float) -> None:
        """(data thread) A transfer this engine initiated finished: count it."""
        self.transfers_done += 1
        self.histograms["transfer_duration_seconds"].observe(duration_s)
        self.histograms["kv_handoff_seconds"].observe(handoff_s)
        if flow in self.dp.flows:
            self.dp.flows[flow].transfers += 1

    def _transfers(self) -> list[dict[str, Any]]:
        """(data thread) Progress of the transfers this engine initiated, for telemetry."""
        groups: dict[int, list[int]] = {}
        for qpn, watch in self.dp.watches.items():
            groups.setdefault(id(watch), []).append(qpn)
        out = []
        for qpns in groups.values():
            w = self.dp.watches[qpns[0]]
            out.append({"qpns": sorted(qpns), "peer_ip": self.dp.peers.get(qpns[0]),
                        "bytes_done": w.bytes_done, "bytes_total": sum(w.lengths.values()),
                        "bytes_sent": sum(self.dp.qps[q].counters.bytes_sent for q in qpns),
                        "messages_done": w.completed, "messages": w.expected})
        return out

    # -- the two sides of a transfer ----------------------------------------

    def initiate(self, job: Job, peer_ip: str, cli: Channel) -> dict[str, Any]:
        """Requester side: WRITE pushes our source, READ pulls the peer's."""
        with self.regions.hold(job.region_bytes, "this transfer"):
            if job.transport == "mrc":
                return mrc.initiate(self, job, peer_ip, cli, _connect_peer(peer_ip))
            return self._initiate(job, peer_ip, cli)

    def _initiate(self, job: Job, peer_ip: str, cli: Channel) -> dict[str, Any]:
        if job.stripe:  # Mooncake: 2 QPs per NIC, QP i on rail i mod NICs
            job = replace(job, qps=QPS_PER_NIC * len(self.ips))
        segments = job.segments()
        holds_source = job.op is Op.WRITE
        buf = source_bytes(job) if holds_source else bytearray(job.region_bytes)
        mr = self.dp.call(lambda: self.dp.memory.register(buf))
        local = self.new_qpns(job.qps)
        qpns = [q["qpn"] for q in local]
        t_setup, feed = time.monotonic(), None
        try:
            with Channel(_connect_peer(peer_ip)) as peer:
                peer.send({"cmd": "accept", "job": job.to_json(), "qps": local, "ip": self.ip,
                           "ips": self.ips})
                reply = peer.recv()
                if reply.get("event") == "error":
                    raise EngineError(f"peer {peer_ip}: {reply['error']}")
                qps = self.new_qps(job, local, reply["qps"])
                watch = Watch(len(segments), {i: s.length for i, s in enumerate(segments)})
                t0 = time.monotonic()
                peer_ips = reply.get("ips") or [peer_ip]
                flow = flow_of(job, self.host, peer_ip, initiator=True)
                feed = self.dp.call(lambda: self._post(job, qps, segments, buf, reply, peer_ips,
                                                       watch, flow))
                self._wait(job, qps, watch, cli, t0)
                t1 = time.monotonic()
                counters = self.dp.call(lambda: self.dp.remove(qpns))
                peer.send({"cmd": "finish"})
                fin = peer.recv()
        finally:  # a failed transfer must not leave QPs or memory behind
            self.dp.call(lambda: self._release(qpns, mr, feed))
        mine = source_digest(job, buf, segments) if holds_source else digest(buf, segments, "dst")
        timing = Timing(t_setup, t0, t1)
        self.dp.call(lambda: self._finished(flow, timing.data_s, timing.handoff_s))
        return self._result(job, qps, counters, fin, mine, watch, timing)

    def _release(self, qpns: list[int], mr: MemoryRegion,
                 feed: Callable[[float], None] | None = None) -> None:
        """Remove a transfer's QPs and deregister its memory (on the data thread); stop
        `feed`ing its ops."""
        if feed in self.dp.tickers:
            self.dp.tickers.remove(feed)
        self.dp.remove(qpns)
        self.dp.memory.deregister(mr)

    def _post(self, job: Job, qps: Sequence[QueuePair], segments, buf: bytearray, reply: dict,
              peer_ips: list[str], watch: Watch, flow: FlowKey) -> Callable[[float], None] | None:
        """(data thread) Serve the QPs and post the ops, batch by batch when `job.piece` is
        set (descriptors.Feeder); return the ticker still posting (None: all posted)."""
        view = memoryview(buf)
        va, rkey = reply["va"], reply["rkey"]
        for i, qp in enumerate(qps):  # QP i on rail i: NIC i mod NICs at each end
            self.dp.add(qp, peer_ips[i % len(peer_ips)], watch, self.ips[i % len(self.ips)], flow)

        def post(i: int, q: int) -> None:  # messages round-robin over QPs: per-QP ECMP entropy
            s, qp = segments[i], qps[q]
            if job.op is Op.WRITE:
                qp.post_write(i, view[s.src_offset:s.src_offset + s.length], va + s.dst_offset, rkey)
            else:
                qp.post_read(i, view[s.dst_offset:s.dst_offset + s.length], va + s.src_offset, rkey)

        rails = len(self.ips)
        feeder = Feeder(len(segments), len(qps), post,
                        lambda i: qp_of(i, len(qps), rails, job.stripe), lambda: watch.completed,
                        depth=SQ_DEPTH if job.piece else len(segments))  # whole messages: all at once
        self.dp.flows[flow].work_requests += len(segments)
        feeder.tick()
        if feeder.finished:
            return None
        self.dp.tickers.append(feeder.tick)
        return feeder.tick  # _release takes it off the tickers

    def _wait(self, job: Job, qps: Sequence[QueuePair], watch: Watch, cli: Channel, t0: float) -> None:
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

    def _result(self, job: Job, qps, counters, fin, mine, watch, timing: Timing) -> dict[str, Any]:
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
                     "udp_sport": qp_sport(q.config), "local_ip": self.ips[i % len(self.ips)],
                     "dcqcn": counters[q.qpn].get("dcqcn"),  # None: DCQCN off on this QP
                     **{k: counters[q.qpn].get(k, 0) for k in SUM_KEYS}} for i, q in enumerate(qps)],
        }

    def on_peer(self, ch: Channel) -> None:
        """Responder side: register the region, create QPs, wait for `finish`."""
        msg = ch.recv()
        if msg.get("cmd") != "accept":
            raise EngineError(f"expected accept, got {msg.get('cmd')!r}")
        job = Job.from_json(msg["job"])
        with self.regions.hold(job.region_bytes, f"peer {msg.get('ip')}"):  # before allocating
            if job.transport == "mrc":
                mrc.respond(self, ch, msg, job)
            else:
                self._respond(ch, msg, job)

    def _respond(self, ch: Channel, msg: dict[str, Any], job: Job) -> None:
        holds_source = job.op is Op.READ
        buf = source_bytes(job) if holds_source else bytearray(job.region_bytes)
        mr = self.dp.call(lambda: self.dp.memory.register(buf))
        local = self.new_qpns(job.qps)
        qps = self.new_qps(job, local, msg["qps"])
        peer_ips = msg.get("ips") or [msg["ip"]]
        flow = flow_of(job, self.host, msg["ip"], initiator=False)
        def add_all() -> None:
            for i, qp in enumerate(qps):
                self.dp.add(qp, peer_ips[i % len(peer_ips)], None, self.ips[i % len(self.ips)], flow)

        self.dp.call(add_all)
        try:
            ch.send({"event": "accepted", "qps": local, "va": mr.va, "rkey": mr.rkey,
                     "ips": self.ips})
            fin = ch.recv()
        finally:
            counters = self.dp.call(lambda: self.dp.remove([q.qpn for q in qps]))
            self.dp.call(lambda: self.dp.memory.deregister(mr))
        if fin.get("cmd") == "finish":
            segments = job.segments()
            mine = source_digest(job, buf, segments) if holds_source else digest(buf, segments, "dst")
            ch.send({"event": "finished", "digest": mine,
                     "counters": {str(k): v for k, v in counters.items()}})


def bind_private(sock: socket.socket, path: Path) -> None:
    """Bind a unix socket that only its owner (root) can connect to: 0600, whatever the
    umask of whoever started the engine (the umask is the process's: set around bind)."""
    old = os.umask(PRIVATE_UMASK)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)


def _connect_peer(ip: str) -> socket.socket:
    try:
        sock = socket.create_connection((ip, CONTROL_PORT), timeout=CONNECT_TIMEOUT_S)
    except OSError as e:
        raise EngineError(f"cannot reach the engine at {ip}:{CONTROL_PORT} "
                          f"({e.strerror or e}); is the path up?") from None
    sock.settimeout(PEER_REPLY_S)
    return sock


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lab", required=True)
    ap.add_argument("--host", required=True)
    ap.add_argument("--ip", required=True)
    ap.add_argument("--rail-ip", action="append", default=[],
                    help="a multi-NIC host's other addresses, rail order")
    ap.add_argument("--sock", required=True, type=Path)
    ap.add_argument("--config", default="{}", help="EngineConfig as JSON")
    ap.add_argument("--pure", action="store_true",
                    help="the pure-Python data path (ROCELAB_ENGINE_PURE=1 where it was started)")
    args = ap.parse_args()
    if args.pure:  # helpers start with a minimal environment: the choice comes as a flag
        os.environ[wire.PURE_ENV] = "1"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    Engine(args.lab, args.host, args.ip, args.sock, EngineConfig.from_json(args.config),
           tuple(args.rail_ip)).serve()


if __name__ == "__main__":
    main()
