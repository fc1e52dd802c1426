"""The engine process: one per host namespace, serving every QP of that host.

    python -m emulator.engine.daemon --lab L --host prefill1 --ip 10.2.0.1 --sock PATH

Control, as perftest does it: the side that initiates a transfer connects
over TCP to the peer engine's port 18515 and exchanges QPNs, PSNs, rkey and
VA; the data then moves as RoCEv2 on UDP 4791. The CLI talks to each engine
over a unix socket in the lab's run dir (`transfer`, `stats`, `ping`, `prepare`: make a
coming transfer's test data ahead of it).

`Engine` holds what the host's transfers share (its QPNs, its data thread, DCQCN, the
regions peers may make it hold), serves both sockets and answers `stats`; each
transfer's two sides are `rc.py` (RC QPs) and `mrc.py` (an MRC connection).
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
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..errors import EngineError, RocelabError
from ..histogram import TRANSFER_BUCKETS, Histogram
from ..perftest.session import Options
from ..roce import wire
from ..roce.dcqcn import CHOICES, ReactionPoint
from ..roce.memory import MemoryRegion
from ..roce.rc import QueuePair
from ..roce.verbs import MAX_RD_ATOMIC, QpConfig
from ..rundirs import PRIVATE_UMASK
from . import mrc, rc
from .config import EngineConfig
from .datathread import DataPlane, FlowKey, reductions
from .job import CONTROL_PORT, Job, prepare_source
from .jsonlines import Channel
from .paced import PacedQueuePair
from .perftest import PerftestJobs, is_engine_peer
from .regions import Regions

log = logging.getLogger("rocelab.engine")
# Outstanding READs: the initiator depth (ORD) and the responder's resources (IRD),
# as rxe has them; the exchange carries IRD, ORD = min(own, peer's IRD).
ORD = IRD = MAX_RD_ATOMIC
CONNECT_TIMEOUT_S = 10.0
PEER_REPLY_S = 60.0  # a peer's reply may wait out a repair: BGP's 9 s hold + TCP's backoff


ACK_TIMEOUT_BACKOFF = 16  # a flow's ack_timeout doubles per retry up to this many times it


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
            return rc.initiate(self, job, peer_ip, cli, _connect_peer)

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
                rc.respond(self, ch, msg, job)

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
