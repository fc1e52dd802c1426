"""The sending half of an MRC connection (sans-IO): spray, SACK, selective resend.

Messages (RDMA WRITE, optionally with immediate) are cut into MTU packets, each
with the next PSN and its own RETH, sent on the connection's usable EVs (an
acknowledged packet's EV recycled first, mrc_lb.py; else round robin) while the
NSCC window and the MPR allow. A SACK acknowledges a
cumulative range and a 64-bit bitmap. Each EV is one path and keeps order, so
a packet is lost when more than `reorder` packets sent after it ON THE SAME EV
were acknowledged (reordering across EVs is normal under spraying and never
counts), when its ACK timer expires or when a NACK names it. A lost packet's EV
is retired at once (down to the floor) and that packet alone is resent on another
usable EV. A TRIM NACK resends exactly the trimmed packet and quick-adapts the
window; it does not retire the EV.

Each packet in flight has a record (`SentPacket`): in the PSN map, in
transmission order, and on its EV's queue in that EV's sending order. On the
compiled path (`_wire`, _wire_mrctx.h) the records are a C type and a run's
records, a cumulative acknowledgement's advance and the per-EV loss scan are
one C call each; the Python code below is the reference (`pure=True`, or
ROCELAB_ENGINE_PURE=1) that tests/unit/roce/test_mrc_tx.py holds it to.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from types import ModuleType
from typing import cast

from emulator.roce import wire
from emulator.roce.mrc_ev import EvSet, EvState, Path
from emulator.roce.mrc_pace import Pacer
from emulator.roce.mrc_state import FOREVER, SenderConfig, SenderCounters, SentMessage, SentPacket
from emulator.roce.mrc_wire import (
    F_ACK_REQ,
    OP_NACK,
    OP_PROBE_REPLY,
    OP_SACK,
    OP_WRITE,
    OP_WRITE_IMM,
    MrcOpcode,
    MrcPacket,
    MrcRun,
    NackCode,
    expand,
    timestamp_us,
    unwrap,
)
from emulator.roce.nscc import Nscc

MPR_UNIT = 128  # PSNs per unit of the maximum PSN range
LINEAR_RETRIES = 7  # ACK timeouts at the base value before they double
_PSN = 1 << 24


def _compiled() -> ModuleType | None:
    """The `_wire` module with the sender's records, configured; None: pure Python."""
    w = wire.compiled()
    if w is None or not hasattr(w, "mrc_track"):
        return None
    w.mrc_tx_configure(Path, SentMessage, EvState.UNKNOWN, EvState.GOOD)
    return w


@dataclass
class MrcSender:
    conn: int
    remote_conn: int
    evs: EvSet
    cc: Nscc
    config: SenderConfig = field(default_factory=SenderConfig)
    pure: bool = False  # the Python records (the reference) even where _wire is built

    def __post_init__(self) -> None:
        self._w = None if self.pure else _compiled()
        self._record = SentPacket if self._w is None else self._w.SentPacket
        self.counters = SenderCounters()
        self.error: str | None = None
        self._msgs: deque[SentMessage] = deque()
        self._numbers = 0
        self._next_psn = self._cack = 0
        # EVs whose acknowledged order moved this SACK, in the order they moved (a dict, not
        # a set: a set's order is its members' addresses, and the scan's order is the
        # resends' order)
        self._acked_paths: dict[Path, None] = {}
        self._pace = Pacer(self.config.rate_bps, 4 * self.config.mtu)
        self._unacked: dict[int, SentPacket] = {}  # transmission order (a resend moves to the end)
        self._resend: deque[SentPacket] = deque()
        self._inflight = 0  # bytes sent and neither acknowledged nor lost
        self._done: list[tuple[int, bool]] = []

    # -- posting and completions ---------------------------------------------

    def post_write(self, wr_id: int, view: memoryview, va: int, rkey: int,
                   imm: int | None = None) -> None:
        packets = max(1, -(-len(view) // self.config.mtu))
        self._msgs.append(SentMessage(self._numbers, wr_id, view, va, rkey, imm, packets))
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
        return expand(self.poll_burst(now, budget))

    def poll_burst(self, now: float, budget: int) -> list[MrcPacket | MrcRun]:
        """`poll`, with a message's full-MTU packets before its last as `MrcRun`s (the
        compiled data path builds those without a Python object per packet)."""
        if self.error:
            return []
        self._timeouts(now)
        budget = self._pace.allowed(now, budget, self.config.mtu)
        out: list[MrcPacket | MrcRun] = []
        sent = self.counters.bytes_sent
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
            self._pace.spent(self.counters.bytes_sent - sent)
        return out

    def _new_packets(self, now: float, room: int, out: list[MrcPacket | MrcRun]) -> None:
        """New data packets while the window, the MPR and `room` allow: a message's
        full-MTU packets before its last go out as one MrcRun, its last as an MrcPacket."""
        msgs, mtu = self._msgs, self.config.mtu
        limit = self.cc.window - self._inflight
        first = psn = self._next_psn
        last_psn = self._cack + self.config.mpr_units * MPR_UNIT
        sent = 0
        while msgs and room > 0 and sent < limit and psn < last_psn:
            msg = msgs[0]
            start = msg.made  # every packet but a message's last is full-MTU
            stop = min(msg.packets - 1, start + room, start + -(-(limit - sent) // mtu),
                       start + last_psn - psn)
            if stop > start:
                out.append(self._run(msg, start, stop, psn, now))
                sent += (stop - start) * mtu
                room -= stop - start
                psn += stop - start
            if stop < msg.packets - 1 or room <= 0 or sent >= limit or psn >= last_psn:
                break
            path = self.evs.next()
            n = len(msg.view) - stop * mtu
            st = self._track(psn, msg, stop, n, path, now)
            msg.made = msg.packets
            msgs.popleft()
            out.append(self._packet(st, now))
            sent += n
            room -= 1
            psn += 1
        self._next_psn = psn
        self._inflight += sent
        self.counters.packets_sent += psn - first
        self.counters.bytes_sent += sent

    def _run(self, msg: SentMessage, start: int, stop: int, psn: int, now: float) -> MrcRun:
        """Packets start..stop-1 of `msg` (full-MTU, from `psn`), each on the next EV."""
        mtu = self.config.mtu
        paths = self.evs.take(stop - start, self._w)
        if self._w is not None:  # _track's work for the whole run, in C
            evs = self._w.mrc_track(self._unacked, psn, msg, start, mtu, paths, now)
            msg.unacked += len(evs)
        else:
            evs = []
            for index, path in enumerate(paths, start):
                self._track(psn + index - start, msg, index, mtu, path, now)
                evs.append(path.plane << 16 | path.ev)
        msg.made = stop
        off = start * mtu
        return MrcRun(self.remote_conn, psn, len(evs), msg.number, timestamp_us(now),
                      len(msg.view), msg.va + off, msg.rkey, mtu, self.config.ack_every, evs,
                      msg.view[off:off + len(evs) * mtu])

    def _track(self, psn: int, msg: SentMessage, index: int, n: int, path: Path, now: float) -> SentPacket:
        """A new packet's state: outstanding, queued on its EV, counted on its path."""
        self._unacked[psn] = st = self._record(psn, msg, index, n, path, now, path.seq_sent)
        path.seq_sent += 1
        path.queue.append(st)
        path.packets += 1
        path.bytes += n
        msg.unacked += 1
        return st

    def _resent(self, st: SentPacket, now: float) -> MrcPacket:
        del self._unacked[st.psn]
        self._unacked[st.psn] = st
        st.lost, st.sent, st.resent = False, now, True
        st.path = path = self.evs.next(avoid=st.path)
        st.seq = path.seq_sent
        path.seq_sent += 1
        path.queue.append(st)
        c, n = self.counters, st.length
        c.retransmitted_packets += 1
        c.retransmitted_bytes += n
        c.packets_sent, c.bytes_sent = c.packets_sent + 1, c.bytes_sent + n
        path.packets, path.bytes = path.packets + 1, path.bytes + n
        self._inflight += n
        return self._packet(st, now)

    def _packet(self, st: SentPacket, now: float) -> MrcPacket:
        msg, path, n = st.msg, st.path, st.length
        last = st.index == msg.packets - 1
        flags = F_ACK_REQ if last or st.psn % self.config.ack_every == 0 else 0
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
        cack = unwrap(p.psn, self._cack)
        acked = self._ack(unwrap(p.ref, self._cack), (p.plane, p.ev))  # the one whose EV is known
        acked += self._ack_range(self._cack, cack)
        self._cack = max(self._cack, cack)
        bm, base = p.bitmap, cack + 1
        while bm:
            low = bm & -bm
            acked += self._ack(base + low.bit_length() - 1)
            bm ^= low
        rtt = _rtt(now, p.ts)
        self.cc.on_ack(now, acked, rtt, bool(p.ce or p.echo & 1))
        if p.echo & 1:  # its trigger packet came back ECN-marked: that EV is set aside
            self.evs.hot(p.plane, p.ev)
        self._scan_losses(now)

    def _ack_range(self, lo: int, hi: int) -> int:
        """`_ack` of every PSN in [lo, hi) (the cumulative acknowledgement's advance: the
        bulk of a SACK's work), inlined; the bytes acknowledged."""
        if self._w is not None:
            evs = self.evs
            acked, inflight, evs.acks = self._w.mrc_ack_range(
                self._unacked, lo, hi, self._acked_paths, self._done, evs.lb.fresh,
                evs.plane_acks, evs.acks)
            self._inflight -= inflight
            return acked
        pop, acked_paths, done = self._unacked.pop, self._acked_paths, self._done
        recycled: list[Path] = []  # each EV whose packet came back, in order (mrc_lb)
        ev_acked: list[Path] = []  # as _ack: the EV set counts every acknowledgement (mrc_ev)
        acked = inflight = 0
        for psn in range(lo, hi):
            st = pop(psn, None)
            if st is None:
                continue
            st.acked = True
            acked += st.length
            path = st.path
            if not st.lost:
                inflight += st.length
                recycled.append(path)
            if not st.resent and st.seq > path.seq_acked:  # no EV known: certain if not resent
                path.seq_acked = st.seq
                acked_paths[path] = None
            ev_acked.append(path)
            msg = st.msg
            msg.unacked -= 1
            if msg.unacked == 0 and msg.made == msg.packets:
                done.append((msg.wr_id, True))
        self.evs.lb.fresh.extend(recycled)
        self.evs.acked_all(ev_acked)
        self._inflight -= inflight
        return acked

    def _ack(self, psn: int, arrived_on: tuple[int, int] | None = None) -> int:
        """Acknowledge `psn`; `arrived_on` is the (plane, EV) it arrived on, if known. The
        EV's order moves only when the acknowledged transmission is certain: an earlier
        transmission of a resent packet arriving late must not make the packets sent
        before the resend on its new EV look lost."""
        st = self._unacked.pop(psn, None)
        if st is None:
            return 0
        st.acked = True
        path = st.path
        if not st.lost:
            self._inflight -= st.length
            self.evs.recycle(path)
        certain = not st.resent or arrived_on == (path.plane, path.ev)
        if certain and st.seq > path.seq_acked:
            path.seq_acked = st.seq
            self._acked_paths[path] = None
        self.evs.acked(path)
        msg = st.msg
        msg.unacked -= 1
        if msg.unacked == 0 and msg.made == msg.packets:
            self._done.append((msg.wr_id, True))
        return st.length

    def _scan_losses(self, now: float) -> None:
        """Per EV, in its sending order: a packet still outstanding while more than
        `reorder` packets sent after it on the same EV were acknowledged is lost."""
        allowance = self.config.reorder
        if self._w is not None:
            for lost in self._w.mrc_scan(self._acked_paths, allowance):
                self._lose(lost, now)
            self._acked_paths.clear()
            return
        for path in self._acked_paths:
            queue, limit = path.queue, path.seq_acked - allowance
            while queue:
                st: SentPacket = queue[0]  # stale once acked, lost or resent elsewhere
                if st.path is path and not st.lost and not st.acked:
                    if st.seq >= limit:
                        break
                    self._lose(st, now)
                queue.popleft()
        self._acked_paths.clear()

    def _lose(self, st: SentPacket, now: float, retire: bool = True) -> None:
        st.lost = True
        self._inflight -= st.length
        self._resend.append(st)
        self.counters.losses += 1
        if retire:
            self.evs.retire(st.path, now)

    def _nack(self, p: MrcPacket, now: float) -> None:
        self.counters.nacks_received += 1
        st = self._unacked.get(unwrap(p.psn, self._cack))
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
            for st in [cast(SentPacket, q) for q in path.queue if q.path is path and not q.lost]:
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

    def stats(self) -> dict[str, object]:
        return {"cwnd_bytes": self.cc.window, "evs_total": len(self.evs.paths),
                "evs_by_state": self.evs.by_state(), "retirements": self.evs.retirements,
                **{k: v for k, v in vars(self.counters).items()},
                "paths": [p.as_dict() for p in self.evs.paths]}


def _rtt(now: float, ts: int) -> float:
    return ((timestamp_us(now) - ts) & 0xFFFFFFFF) / 1e6
