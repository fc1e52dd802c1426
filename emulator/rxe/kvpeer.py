"""The engine's peer protocol spoken by real verbs: a transfer's rxe side, run in the guest.

    python3 -m emulator.rxe.kvpeer initiate --ip MINE --peer-ip IP --job JSON
    python3 -m emulator.rxe.kvpeer serve --ip MINE [--timeout S]

Run by the host (emulator/hosts/rxe.py) through the guest's agent, with the
system /usr/bin/python3 and Debian's python3-pyverbs (rdma-core's binding), so
every step is a real ibv_* call on rxe0: ibv_reg_mr over the job's region, one RC
QP per job QP, ibv_modify_qp to RTR/RTS with the peer's QPN/PSN, ibv_post_send of
the job's WRITEs/READs, ibv_poll_cq. The control exchange is the engine's own
(emulator/engine/daemon.py `initiate`/`on_peer`, JSON lines on TCP 18515):

    initiator -> {"cmd": "accept", "job", "qps": [{qpn, psn, ird}], "ip", "ips"}
    responder -> {"event": "accepted", "qps": [...], "va", "rkey", "ips"}
    ... the initiator's WRITEs/READs complete ...
    initiator -> {"cmd": "finish"}
    responder -> {"event": "finished", "digest", "counters": {qpn: {...}}}

Both ends derive the same segments from the job and hash their side of them
(job.digest), so equal digests prove every byte landed where it belonged.

stdout is JSON lines for the host: {"event": "listening"} (serve), "progress",
then "result" (or "error"). The engine's per-QP counters have no rxe twin: rxe
counts per device (hw_counters), so the deltas over the transfer are mapped onto
the engine's keys (see `engine_counters`) and given raw as "rxe".
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import time
from typing import Any

from emulator.engine.job import CONTROL_PORT, SUM_KEYS, Job, Op, digest, source_bytes
from emulator.engine.jsonlines import Channel
from emulator.roce.headers import udp_source_port
from emulator.roce.verbs import MAX_RD_ATOMIC
from emulator.rxe.agent import counters as hw_counters

DEVICE, PORT, GID_INDEX = "rxe0", 1, 1  # GID 1: the RoCEv2 IPv4-mapped GID
ORD = IRD = MAX_RD_ATOMIC  # rxe's max_qp_rd_atom, as the engine has them
SQ_DEPTH = 128  # WRs outstanding per QP
RETRY_CNT = RNR_RETRY = 7  # 7: RNR retried for ever (the engine's responder never RNRs)
DEFAULT_TIMEOUT_EXP = 14  # 4.096 us x 2^14 = 67 ms, perftest's default
MIN_RNR_TIMER = 12
PROGRESS_EVERY_S = 0.25
CHUNK = 4 << 20  # region copies into/out of the MR in pieces


class PeerError(Exception):
    pass


# -- pure pieces (unit-tested on the host, no pyverbs) ---------------------------------

def ib_timeout(seconds: float) -> int:
    """The IB local ACK timeout exponent (4.096 us x 2^t) closest above `seconds`."""
    if seconds <= 0:
        return DEFAULT_TIMEOUT_EXP
    t = 1
    while 4.096e-6 * (1 << t) < seconds and t < 31:
        t += 1
    return t


def data_packets(job: Job) -> int:
    """Packets the data side sends if nothing is lost: every message cut at the path MTU."""
    return sum(-(-s.length // job.mtu) for s in job.segments())


def engine_counters(delta: dict[str, int], job: Job, initiator: bool) -> dict[str, int]:
    """rxe's device counters over one transfer as the engine's per-QP keys.

    The data sender (WRITE requester, READ responder) retransmitted what it sent beyond
    the job's packets; a READ requester, the READ requests beyond one per message.
    rxe's completer_retry_err counts every go-back (NAK or timer), rcvd_seq_err the
    NAKs among them, so timeouts are the difference. rxe counts no NAKs it sends
    (out_of_seq_request counts out-of-order packets, which it drops), no ICRC errors
    per se, no CNPs: those stay 0."""
    sends_data = (job.op is Op.WRITE) == initiator
    sent = delta.get("sent_pkts", 0)
    if sends_data:
        retrans = max(0, sent - data_packets(job))
    elif initiator:  # READ requester: one READ request per message
        retrans = max(0, sent - len(job.segments()))
    else:  # WRITE responder: ACKs only
        retrans = 0
    retries = delta.get("completer_retry_err", 0)
    naks = delta.get("rcvd_seq_err", 0) + delta.get("rcvd_rnr_err", 0)
    out = dict.fromkeys(SUM_KEYS, 0)
    out.update(retransmitted_packets=retrans, naks_rx=naks, packets_sent=sent,
               timeouts=max(0, retries - delta.get("rcvd_seq_err", 0)),
               duplicates=delta.get("duplicate_request", 0))
    return out


def counter_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def mapped_gid(ip: str) -> str:
    """::ffff:a.b.c.d as the 8 groups pyverbs' GID parses."""
    a, b, c, d = (int(x) for x in ip.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a << 8 | b:04x}:{c << 8 | d:04x}"


def emit(msg: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(msg, separators=(",", ":")) + "\n")
    sys.stdout.flush()


# -- verbs -------------------------------------------------------------------------------

class Rdma:
    """A PD, one MR over the job's region, a CQ and job.qps RC QPs on rxe0.

    The side holding the source (WRITE requester, READ responder) starts with the job's
    source bytes in the MR; the other with zeros."""

    def __init__(self, job: Job, holds_source: bool):
        import pyverbs.enums as e
        from pyverbs.cq import CQ
        from pyverbs.device import Context
        from pyverbs.mr import MR
        from pyverbs.pd import PD
        from pyverbs.qp import QP, QPCap, QPInitAttr

        self.e, self.job, self.holds_source = e, job, holds_source
        self.ctx = Context(name=DEVICE)
        self.pd = PD(self.ctx)
        self.access = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
                       | e.IBV_ACCESS_REMOTE_READ)
        self.size = job.region_bytes
        self.mr = MR(self.pd, self.size, self.access)
        if holds_source:
            region = source_bytes(job)
            for off in range(0, self.size, CHUNK):
                n = min(CHUNK, self.size - off)
                self.mr.write(bytes(region[off:off + n]), n, off)
        self.cq = CQ(self.ctx, SQ_DEPTH * job.qps + 16)
        cap = QPCap(max_send_wr=SQ_DEPTH, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
        self.qps = [QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                                           cap=cap)) for _ in range(job.qps)]
        self.local = [{"qpn": qp.qp_num, "psn": random.randrange(1 << 24), "ird": IRD}
                      for qp in self.qps]

    def connect(self, remote: list[dict[str, int]], peer_ip: str) -> None:
        """RESET -> INIT -> RTR -> RTS with the peer's QPN/PSN, to ::ffff:peer_ip."""
        from pyverbs.addr import GID, AHAttr, GlobalRoute
        from pyverbs.qp import QPAttr

        e, job = self.e, self.job
        if len(remote) != len(self.qps):
            raise PeerError(f"peer offered {len(remote)} QPs for a {len(self.qps)}-QP job")
        mtu = {256: e.IBV_MTU_256, 512: e.IBV_MTU_512, 1024: e.IBV_MTU_1024,
               2048: e.IBV_MTU_2048, 4096: e.IBV_MTU_4096}[job.mtu]
        for qp, mine, theirs in zip(self.qps, self.local, remote):
            gr = GlobalRoute(dgid=GID(mapped_gid(peer_ip)), sgid_index=GID_INDEX,
                             hop_limit=64, traffic_class=job.dscp << 2)
            attr = QPAttr()
            attr.qp_access_flags, attr.port_num, attr.pkey_index = self.access, PORT, 0
            attr.path_mtu = mtu
            attr.dest_qp_num, attr.rq_psn = theirs["qpn"], theirs["psn"]
            attr.max_dest_rd_atomic, attr.min_rnr_timer = IRD, MIN_RNR_TIMER
            attr.ah_attr = AHAttr(gr=gr, is_global=1, port_num=PORT)
            attr.sq_psn = mine["psn"]
            attr.timeout = ib_timeout(job.ack_timeout_s)
            attr.retry_cnt, attr.rnr_retry = RETRY_CNT, RNR_RETRY
            attr.max_rd_atomic = max(1, min(ORD, int(theirs.get("ird", ORD))))
            qp.to_rts(attr)

    def run(self, va: int, rkey: int, deadline: float) -> int:
        """Post every segment (message i on QP i mod qps, as the engine stripes them),
        SQ_DEPTH outstanding per QP; return the bytes completed."""
        from pyverbs.wr import SGE, SendWR

        e, job = self.e, self.job
        segments = job.segments()
        nq = len(self.qps)
        queue = [list(range(q, len(segments), nq)) for q in range(nq)]
        nxt, out = [0] * nq, [0] * nq
        by_qpn = {qp.qp_num: i for i, qp in enumerate(self.qps)}
        opcode = e.IBV_WR_RDMA_WRITE if job.op is Op.WRITE else e.IBV_WR_RDMA_READ
        done = bytes_done = 0
        last = time.monotonic()
        while done < len(segments):
            for q, qp in enumerate(self.qps):
                while out[q] < SQ_DEPTH and nxt[q] < len(queue[q]):
                    i = queue[q][nxt[q]]
                    s = segments[i]
                    local, remote = ((s.src_offset, s.dst_offset) if job.op is Op.WRITE
                                     else (s.dst_offset, s.src_offset))
                    wr = SendWR(wr_id=i, opcode=opcode, num_sge=1,
                                sg=[SGE(self.mr.buf + local, s.length, self.mr.lkey)],
                                send_flags=e.IBV_SEND_SIGNALED)
                    wr.set_wr_rdma(rkey, va + remote)
                    qp.post_send(wr)
                    nxt[q] += 1
                    out[q] += 1
            n, wcs = self.cq.poll(64)
            for wc in wcs[:n]:
                if wc.status != e.IBV_WC_SUCCESS:
                    raise PeerError(f"{job.op.value} message {wc.wr_id} on QP {wc.qp_num:#x}: "
                                    f"completion status {wc.status} ({_wc_status(wc.status)})")
                out[by_qpn[wc.qp_num]] -= 1
                done += 1
                bytes_done += segments[wc.wr_id].length
            now = time.monotonic()
            if now - last >= PROGRESS_EVERY_S:
                emit({"event": "progress", "bytes": bytes_done, "total": job.payload_bytes})
                last = now
                if now > deadline:
                    raise PeerError(f"not finished within {job.timeout_s:.0f} s "
                                    f"({done}/{len(segments)} messages)")
            if not n:
                time.sleep(0.0005)  # one vCPU: leave it to rxe's kernel work
        return bytes_done

    def region(self) -> bytearray:
        buf = bytearray(self.size)
        for off in range(0, self.size, CHUNK):
            n = min(CHUNK, self.size - off)
            buf[off:off + n] = self.mr.read(n, off)
        return buf

    def digest(self) -> str:
        """job.digest of this side's region: the source it sent or the destination it filled."""
        return digest(self.region(), self.job.segments(), "src" if self.holds_source else "dst")

    def close(self) -> None:
        for qp in self.qps:
            qp.close()
        self.cq.close()
        self.mr.close()
        self.pd.close()
        self.ctx.close()

    def __enter__(self) -> Rdma:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _wc_status(status: int) -> str:
    try:
        from pyverbs.cq import cqe_status_to_str
        return str(cqe_status_to_str(status))
    except Exception:  # noqa: BLE001 -- only a name for the message
        return "see ibv_wc_status"


# -- the two roles ------------------------------------------------------------------------

def initiate(job: Job, ip: str, peer_ip: str) -> dict[str, Any]:
    """Requester: WRITE pushes our source into the peer's region, READ pulls the peer's."""
    t_setup = time.monotonic()
    with Rdma(job, holds_source=job.op is Op.WRITE) as rdma:
        try:
            sock = socket.create_connection((peer_ip, CONTROL_PORT), timeout=10.0)
        except OSError as e:
            raise PeerError(f"cannot reach {peer_ip}:{CONTROL_PORT} ({e.strerror or e})") from None
        sock.settimeout(None)
        with Channel(sock) as peer:
            peer.send({"cmd": "accept", "job": job.to_json(), "qps": rdma.local, "ip": ip,
                       "ips": [ip]})
            reply = peer.recv()
            if reply.get("event") == "error":
                raise PeerError(f"peer {peer_ip}: {reply['error']}")
            rdma.connect(reply["qps"], (reply.get("ips") or [peer_ip])[0])
            before = hw_counters()
            t0 = time.monotonic()
            rdma.run(int(reply["va"]), int(reply["rkey"]), t0 + job.timeout_s)
            t1 = time.monotonic()
            delta = counter_delta(before, hw_counters())
            peer.send({"cmd": "finish"})
            fin = peer.recv()
        mine = rdma.digest()
    if fin.get("event") != "finished":
        raise PeerError(f"peer {peer_ip}: {fin.get('error') or fin}")
    ours = engine_counters(delta, job, initiator=True)
    theirs = list(fin.get("counters", {}).values())
    receivers = theirs if job.op is Op.WRITE else []  # rxe measures no delivery gaps
    dur = max(t1 - t0, 1e-9)
    return {
        "op": job.op.value, "bytes": job.payload_bytes, "duration_s": round(dur, 6),
        "setup_s": round(t0 - t_setup, 6), "handoff_s": round(t1 - t_setup, 6),
        "goodput_gbps": round(job.payload_bytes * 8 / dur / 1e9, 4),
        "messages": len(job.segments()), "integrity_ok": mine == fin.get("digest"),
        "digest": mine, "peer_digest": fin.get("digest"),
        "interruption_s": max((c.get("max_rx_gap_s", 0.0) for c in receivers), default=0.0),
        **{k: ours[k] + sum(c.get(k, 0) for c in theirs) for k in SUM_KEYS},
        "qps": [{"qpn": m["qpn"], "remote_qpn": r["qpn"], "udp_sport": udp_source_port(m["qpn"], r["qpn"]),
                 "local_ip": ip, "dcqcn": None,
                 # device counters: all on the first QP, the peer's per QP
                 **{k: (ours[k] if i == 0 else 0) + fin.get("counters", {}).get(str(r["qpn"]), {}).get(k, 0)
                    for k in SUM_KEYS}}
                for i, (m, r) in enumerate(zip(rdma.local, reply["qps"]))],
        "rxe": {"role": "initiator", "counters": delta},
    }


def serve(ip: str, timeout_s: float) -> dict[str, Any]:
    """Responder for one transfer: as the engine's on_peer, on the guest's own 18515."""
    listener = socket.create_server((ip, CONTROL_PORT))
    listener.settimeout(timeout_s)
    emit({"event": "listening", "ip": ip, "port": CONTROL_PORT})
    try:
        conn, (peer_ip, _) = listener.accept()
    except TimeoutError:
        raise PeerError(f"no initiator connected within {timeout_s:g} s") from None
    finally:
        listener.close()
    conn.settimeout(None)
    with Channel(conn) as ch:
        msg = ch.recv()
        if msg.get("cmd") != "accept":
            raise PeerError(f"expected accept, got {msg.get('cmd')!r}")
        job = Job.from_json(msg["job"])
        with Rdma(job, holds_source=job.op is Op.READ) as rdma:
            rdma.connect(msg["qps"], (msg.get("ips") or [msg.get("ip") or peer_ip])[0])
            before = hw_counters()
            ch.send({"event": "accepted", "qps": rdma.local, "va": rdma.mr.buf,
                     "rkey": rdma.mr.rkey, "ips": [ip]})
            fin = ch.recv()
            delta = counter_delta(before, hw_counters())
            mine = rdma.digest()
        if fin.get("cmd") != "finish":
            raise PeerError(f"expected finish, got {fin}")
        ours = engine_counters(delta, job, initiator=False)
        counters = {str(m["qpn"]): (ours if i == 0 else dict.fromkeys(SUM_KEYS, 0))
                    for i, m in enumerate(rdma.local)}
        ch.send({"event": "finished", "digest": mine, "counters": counters})
    return {"role": "responder", "op": job.op.value, "digest": mine, "peer_ip": peer_ip,
            "qps": rdma.local, "counters": ours, "rxe": {"role": "responder", "counters": delta}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="role", required=True)
    ini = sub.add_parser("initiate")
    ini.add_argument("--ip", required=True)
    ini.add_argument("--peer-ip", required=True)
    ini.add_argument("--job", required=True, help="the Job as JSON")
    srv = sub.add_parser("serve")
    srv.add_argument("--ip", required=True)
    srv.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args(argv)
    try:
        if args.role == "initiate":
            res = initiate(Job.from_json(json.loads(args.job)), args.ip, args.peer_ip)
        else:
            res = serve(args.ip, args.timeout)
    except Exception as e:  # noqa: BLE001 -- the host reads one line saying what failed
        emit({"event": "error", "error": f"{type(e).__name__}: {e}" if not isinstance(
            e, PeerError) else str(e)})
        return 1
    emit({"event": "result", **res})
    return 0


if __name__ == "__main__":
    sys.exit(main())
