"""The sending half of an MRC connection (sans-IO): spray, SACK, selective resend.

Messages (RDMA WRITE, optionally with immediate) are cut into MTU packets, each
with the next PSN and its own RETH, sent round robin over the connection's
usable EVs while the NSCC window and the MPR allow. A SACK acknowledges a
cumulative range and a 64-bit bitmap. Each EV is one path and keeps order, so
a packet is lost when more than `reorder` packets sent after it ON THE SAME EV
were acknowledged (reordering across EVs is normal under spraying and never
counts), when its ACK timer expires or when a NACK names it. A lost packet's EV
is retired at once (down to the floor) and that packet alone is resent on another
usable EV. A TRIM NACK resends exactly the trimmed packet and quick-adapts the
window; it does not retire the EV.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import cast

from emulator.roce.mrc_ev import EvSet, Path
from emulator.roce.mrc_wire import (
    F_ACK_REQ,
    OP_NACK,
    OP_PROBE_REPLY,
    OP_SACK,
    OP_WRITE,
    OP_WRITE_IMM,
    MrcOpcode,
    MrcPacket,
    NackCode,
    timestamp_us,
)
from emulator.roce.nscc import Nscc

MPR_UNIT = 128  # PSNs per unit of the maximum PSN range
LINEAR_RETRIES = 7  # ACK timeouts at the base value before they double
FOREVER = 25  # a retry limit of 25 means retry forever (MRC 1.0)
_PSN = 1 << 24


@dataclass(slots=True)
class _Msg:
    number: int
    wr_id: int
    view: memoryview
    va: int
    rkey: int
    imm: int | None
    packets: int
    made: int = 0
    unacked: int = 0


@dataclass(slots=True)
class _Pkt:
    psn: int
    msg: _Msg
    index: int
    length: int
    path: Path
    sent: float
    tx: int
    seq: int = 0  # its place in its EV's sending order
    retries: int = 0
    lost: bool = False
    resent: bool = False  # an acknowledgement may be of an earlier transmission


@dataclass
class SenderCounters:
    packets_sent: int = 0
    bytes_sent: int = 0
    retransmitted_packets: int = 0
    retransmitted_bytes: int = 0
    sacks_received: int = 0
    nacks_received: int = 0
    trim_nacks_received: int = 0
    timeouts: int = 0
    losses: int = 0
    probes_sent: int = 0
    probes_answered: int = 0


@dataclass
class SenderConfig:
    mtu: int = 4096
    ack_timeout_s: float = 0.067  # 1.024 us x 2^t x dilation
    max_retries: int = FOREVER
    mpr_units: int = 64
    reorder: int = 0  # packets sent later on the same EV and acknowledged beyond which it is lost
    rate_bps: float = 0.0  # the connection's pacing rate (wall bit/s); 0: none
    ack_every: int = 16  # ACK_REQ on every this many packets (and a message's last)


@dataclass
class MrcSender:
    conn: int
    remote_conn: int
    evs: EvSet
    cc: Nscc
    config: SenderConfig = field(default_factory=SenderConfig)

    def __post_init__(self) -> None:
        self.counters = SenderCounters()
        self.error: str | None = None
        self._msgs: deque[_Msg] = deque()
        self._numbers = 0
        self._next_psn = self._cack = self._tx = 0
        self._acked_paths: set[Path] = set()  # EVs whose acknowledged order moved this SACK
        self._pace = Pacer(self.config.rate_bps, 4 * self.config.mtu)
        self._unacked: dict[int, _Pkt] = {}  # transmission order (a resend moves to the end)
        self._resend: deque[_Pkt] = deque()
        self._inflight = 0  # bytes sent and neither acknowledged nor lost
        self._done: list[tuple[int, bool]] = []

    # -- posting and completions ---------------------------------------------

    def post_write(self, wr_id: int, view: memoryview, va: int, rkey: int,
                   imm: int | None = None) -> None:
        packets = max(1, -(-len(view) // self.config.mtu))
        self._msgs.append(_Msg(self._numbers, wr_id, view, va, rkey, imm, packets))
        self._numbers += 1

    def completions(self) -> list[tuple[int, bool]]:
        done, self._done = self._done, []
        return done

    @property
    def idle(self) -> bool:
        return not self._msgs and not self._unacked

    # -- sending -------------------------------------------------------------

    def poll(self, now: float, budget: int) -> list[MrcPacket]:
        """Up to `budget` packets to send now: resends first, then new data, then probes."""
        if self.error:
            return []
        self._timeouts(now)
        budget = self._pace.allowed(now, budget, self.config.mtu)
        out: list[MrcPacket] = []
        while self._resend and len(out) < budget:
            st = self._resend.popleft()
            if self._unacked.get(st.psn) is st:
                out.append(self._resent(st, now))
        if self._msgs and len(out) < budget:
            self._new_packets(now, budget - len(out), out)
        for path in self.evs.probes_due(now):
            self.counters.probes_sent += 1
            out.append(MrcPacket(MrcOpcode.PROBE, self.remote_conn, 0, 0, path.plane, path.ev,
                                 ts=timestamp_us(now), ext=self.counters.probes_sent))
        if self._pace.rate:
            self._pace.spent(sum(len(p.payload) for p in out if p.is_data))
        return out

    def _new_packets(self, now: float, room: int, out: list[MrcPacket]) -> None:
        """New data packets while the window, the MPR and `room` allow (the hot loop:
        `_emit` inlined, attributes held in locals)."""
        msgs, unacked, next_ev, counters = self._msgs, self._unacked, self.evs.next, self.counters
        mtu, every, conn, ts = self.config.mtu, self.config.ack_every, self.remote_conn, timestamp_us(now)
        limit = self.cc.window - self._inflight
        first = psn = self._next_psn
        last_psn = self._cack + self.config.mpr_units * MPR_UNIT
        sent = 0
        while msgs and room and sent < limit and psn < last_psn:
            msg = msgs[0]
            index, path = msg.made, next_ev()
            off = index * mtu
            n = min(mtu, len(msg.view) - off)
            unacked[psn] = st = _Pkt(psn, msg, index, n, path, now, self._tx, path.seq_sent)
            path.seq_sent += 1
            path.queue.append(st)
            self._tx += 1
            msg.made = index + 1
            msg.unacked += 1
            last = msg.made == msg.packets
            if last:
                msgs.popleft()
            imm = last and msg.imm is not None
            out.append(MrcPacket(OP_WRITE_IMM if imm else OP_WRITE, conn, psn % _PSN,
                                 F_ACK_REQ if last or psn % every == 0 else 0, path.plane,
                                 path.ev, msg.number, ts, len(msg.view), msg.va + off, msg.rkey,
                                 n, (msg.imm or 0) if imm else 0, msg.view[off:off + n]))
            path.packets += 1
            path.bytes += n
            sent += n
            psn += 1
            room -= 1
        self._next_psn = psn
        self._inflight += sent
        counters.packets_sent += psn - first
        counters.bytes_sent += sent

    def _resent(self, st: _Pkt, now: float) -> MrcPacket:
        del self._unacked[st.psn]
        self._unacked[st.psn] = st
        st.lost, st.sent, st.tx, st.resent = False, now, self._tx, True
        st.path = path = self.evs.next(avoid=st.path)
        st.seq = path.seq_sent
        path.seq_sent += 1
        path.queue.append(st)
        self.counters.retransmitted_packets += 1
        self.counters.retransmitted_bytes += st.length
        return self._emit(st, now)

    def _emit(self, st: _Pkt, now: float) -> MrcPacket:
        self._tx += 1
        self._inflight += st.length
        msg, path, n = st.msg, st.path, st.length
        last = st.index == msg.packets - 1
        flags = F_ACK_REQ if last or st.psn % self.config.ack_every == 0 else 0
        path.packets += 1
        path.bytes += n
        self.counters.packets_sent += 1
        self.counters.bytes_sent += n
        off = st.index * self.config.mtu
        imm = last and msg.imm is not None
        return MrcPacket(OP_WRITE_IMM if imm else OP_WRITE, self.remote_conn,
                         st.psn % _PSN, flags, path.plane, path.ev, msg.number, timestamp_us(now),
                         len(msg.view), msg.va + off, msg.rkey, n,
                         (msg.imm or 0) if imm else 0, msg.view[off:off + n])

    # -- receiving -----------------------------------------------------------

    def receive(self, p: MrcPacket, now: float) -> None:
        op = p.opcode
        if op == OP_SACK:
            self._sack(p, now)
        elif op == OP_NACK:
            self._nack(p, now)
        elif op == OP_PROBE_REPLY:
            if self.evs.answered(p.plane, p.ev, _rtt(now, p.ts)):
                self.counters.probes_answered += 1

    def _sack(self, p: MrcPacket, now: float) -> None:
        self.counters.sacks_received += 1
        cack = self._unwrap(p.psn)
        acked = self._ack(self._unwrap(p.ref), (p.plane, p.ev))  # the one whose EV is known
        for psn in range(self._cack, cack):
            acked += self._ack(psn)
        self._cack = max(self._cack, cack)
        bm, base = p.bitmap, cack + 1
        while bm:
            low = bm & -bm
            acked += self._ack(base + low.bit_length() - 1)
            bm ^= low
        self.cc.on_ack(now, acked, _rtt(now, p.ts), bool(p.ce or p.echo & 1))
        self._scan_losses(now)

    def _ack(self, psn: int, arrived_on: tuple[int, int] | None = None) -> int:
        """Acknowledge `psn`; `arrived_on` is the (plane, EV) it arrived on, if known. The
        EV's order moves only when the acknowledged transmission is certain: an earlier
        transmission of a resent packet arriving late must not make the packets sent
        before the resend on its new EV look lost."""
        st = self._unacked.pop(psn, None)
        if st is None:
            return 0
        if not st.lost:
            self._inflight -= st.length
        path = st.path
        certain = not st.resent or arrived_on == (path.plane, path.ev)
        if certain and st.seq > path.seq_acked:
            path.seq_acked = st.seq
            self._acked_paths.add(path)
        self.evs.acked(path)
        msg = st.msg
        msg.unacked -= 1
        if msg.unacked == 0 and msg.made == msg.packets:
            self._done.append((msg.wr_id, True))
        return st.length

    def _scan_losses(self, now: float) -> None:
        """Per EV, in its sending order: a packet still outstanding while more than
        `reorder` packets sent after it on the same EV were acknowledged is lost."""
        unacked, allowance = self._unacked, self.config.reorder
        for path in self._acked_paths:
            queue, limit = path.queue, path.seq_acked - allowance
            while queue:
                st = cast(_Pkt, queue[0])  # stale once acked, lost or resent elsewhere
                if st.path is path and not st.lost and unacked.get(st.psn) is st:
                    if st.seq >= limit:
                        break
                    self._lose(st, now)
                queue.popleft()
        self._acked_paths.clear()

    def _lose(self, st: _Pkt, now: float, retire: bool = True) -> None:
        st.lost = True
        self._inflight -= st.length
        self._resend.append(st)
        self.counters.losses += 1
        if retire:
            self.evs.retire(st.path, now)

    def _nack(self, p: MrcPacket, now: float) -> None:
        self.counters.nacks_received += 1
        st = self._unacked.get(self._unwrap(p.psn))
        if p.echo == NackCode.ACCESS:
            self._fail(f"the peer refused PSN {p.psn} (remote access error)")
            return
        trim = p.echo in (NackCode.TRIMMED, NackCode.TRIMMED_LASTHOP)
        if trim:
            self.counters.trim_nacks_received += 1
        self.cc.on_nack(now)
        if st is not None and not st.lost:
            self._lose(st, now, retire=not trim)
            if trim:  # exactly that packet, before anything else
                self._resend.remove(st)
                self._resend.appendleft(st)

    def _timeouts(self, now: float) -> None:
        for path in self.evs.take_presumed():  # a plane presumed lost (mrc_ev): its packets too
            for st in [cast(_Pkt, q) for q in path.queue if q.path is path and not q.lost]:
                if self._unacked.get(st.psn) is st:
                    self._lose(st, now, retire=False)
            path.queue.clear()
        expired = []
        for st in self._unacked.values():
            if st.lost:
                continue
            if now - st.sent < self.timeout(st.retries):
                break
            expired.append(st)
        for st in expired:
            st.retries += 1
            self.counters.timeouts += 1
            limit = self.config.max_retries
            if limit < FOREVER and st.retries > limit:
                self._fail(f"PSN {st.psn}: no acknowledgement after {limit} retries")
                return
            self._lose(st, now)

    def timeout(self, retries: int) -> float:
        """The ACK timeout after `retries` timeouts: linear for the first 7, then doubling."""
        base = self.config.ack_timeout_s
        return base if retries < LINEAR_RETRIES else base * (1 << min(retries - LINEAR_RETRIES + 1, 18))

    def _fail(self, reason: str) -> None:
        if self.error is None:
            self.error = reason
            self._done.extend((m.wr_id, False) for m in self._msgs)

    def next_deadline(self) -> float | None:
        """When `poll` has something to do at the latest (0: now)."""
        ready = self._pace.ready()  # paced: nothing goes before the bucket refills
        if self._resend or (ready is not None and self._msgs):
            return ready or 0.0
        times = []
        first = next((st for st in self._unacked.values() if not st.lost), None)
        if first is not None:  # the oldest transmission times out first
            times.append(first.sent + self.timeout(first.retries))
        probe = self.evs.next_probe()
        if probe is not None:
            times.append(probe)
        return min(times) if times else None

    def _unwrap(self, psn24: int) -> int:
        """A 24-bit PSN from the wire as the full PSN nearest the cumulative ack."""
        base = self._cack
        diff = (psn24 - base) % _PSN
        return base + diff if diff < _PSN // 2 else base + diff - _PSN

    def stats(self) -> dict[str, object]:
        return {"cwnd_bytes": self.cc.window, "evs_total": len(self.evs.paths),
                "evs_by_state": self.evs.by_state(), "retirements": self.evs.retirements,
                **{k: v for k, v in vars(self.counters).items()},
                "paths": [p.as_dict() for p in self.evs.paths]}


class Pacer:
    """A token bucket limiting the connection to `rate_bps` (0: unlimited), as RC's
    paced queue pairs are limited (a NIC's per-QP rate limit)."""

    def __init__(self, rate_bps: float, burst: int):
        self.rate, self.burst = float(rate_bps), burst
        self.tokens, self.last = float(burst), None  # type: float, float | None

    def allowed(self, now: float, budget: int, mtu: int) -> int:
        """How many of `budget` MTU packets may go now."""
        if not self.rate:
            return budget
        if self.last is not None:
            self.tokens = min(self.burst, self.tokens + self.rate / 8 * (now - self.last))
        self.last = now
        return 0 if self.tokens < 0 else min(budget, max(1, int(self.tokens // mtu)))

    def spent(self, n: int) -> None:
        if self.rate:
            self.tokens -= n

    def ready(self) -> float | None:
        """When the bucket is out of debt (None: it is not in debt)."""
        if not self.rate or self.tokens >= 0 or self.last is None:
            return None
        return self.last - self.tokens * 8 / self.rate


def _rtt(now: float, ts: int) -> float:
    return ((timestamp_us(now) - ts) & 0xFFFFFFFF) / 1e6
