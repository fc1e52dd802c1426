"""The receiving half of an MRC connection (sans-IO): place in any order, SACK, NACK.

Every data packet carries its own RETH, so it is placed where it belongs the
moment it arrives, whatever came before. A message is complete when every one
of its bytes is placed (duplicates place nothing). The receiver acknowledges
with SACKs (cumulative PSN + a 64-bit bitmap + the ECN marks seen), answers a
trimmed packet with a TRIM NACK and every probe with a probe reply on its EV.

On the compiled data path (`_wire.mrc_place`, _wire_mrcrx.h) a burst's data packets
are placed and recorded in C, the received PSNs kept as a bitmap ahead of the
cumulative point; Python sees only what needs a decision (a message's bytes placed,
a SACK or access NACK due, a probe, a trimmed packet, another R_Key). The Python
path (`pure=True`, or ROCELAB_ENGINE_PURE=1) is the reference the C one is tested
against (tests/unit/roce/test_mrc_rx.py).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from types import ModuleType

from emulator.roce import wire
from emulator.roce.memory import Access, MemoryRegion, MemoryTable
from emulator.roce.mrc_wire import (
    F_ACK_REQ,
    F_LASTHOP,
    F_TRIMMED,
    OP_PROBE,
    OP_WRITE_IMM,
    MrcOpcode,
    MrcPacket,
    NackCode,
    timestamp_us,
    unwrap,
)

_PSN = 1 << 24
BITMAP_BITS = 64


@dataclass
class ReceiverCounters:
    packets: int = 0
    bytes_placed: int = 0
    duplicates: int = 0
    messages_done: int = 0
    sacks_sent: int = 0
    nacks_sent: int = 0
    trim_nacks_sent: int = 0
    ce_packets: int = 0
    access_errors: int = 0


def _compiled() -> ModuleType | None:
    w = wire.compiled()
    if w is None or not hasattr(w, "mrc_place"):
        return None
    w.mrc_configure(MrcPacket)
    return w


class MrcReceiver:
    def __init__(self, conn: int, remote_conn: int, memory: MemoryTable, ack_every: int = 16,
                 pure: bool = False):
        self.conn, self.remote_conn, self.memory = conn, remote_conn, memory
        self.ack_every = ack_every
        self.counters = ReceiverCounters()
        self._w = None if pure else _compiled()
        self._state = self._w.mrc_rx_state() if self._w is not None else bytearray(32)
        self._sv = memoryview(self._state).cast("Q")  # cack, pending, pending_ce, beyond
        self._cack = 0  # every PSN below it was received (the Python path's)
        self._ahead: set[int] = set()
        self._placed: dict[int, int] = {}  # message number -> bytes placed so far
        self._pending = self._pending_ce = 0
        self._last: MrcPacket | None = None  # the last data packet not yet acknowledged
        self._mr: MemoryRegion | None = None
        self._key = -1  # the R_Key self._mr was resolved for (the compiled path)
        self.immediates: list[int] = []

    @property
    def cack(self) -> int:
        """Every PSN below it was received."""
        return self._sv[0] if self._w is not None else self._cack

    def receive(self, p: MrcPacket, now: float) -> list[MrcPacket]:
        """One packet in; the packets to answer it with."""
        op = p.opcode
        if op == OP_PROBE:
            return [p._replace(opcode=MrcOpcode.PROBE_REPLY, conn=self.remote_conn, flags=0)]
        if op > OP_WRITE_IMM:
            return []
        flags = p.flags
        if flags & F_TRIMMED:
            return [self._nack(p, NackCode.TRIMMED_LASTHOP if flags & F_LASTHOP
                               else NackCode.TRIMMED, now)]
        if self._w is not None:
            return self._burst([p], 0, p.conn, None, now)[1]
        c = self.counters
        psn = unwrap(p.psn, self._cack)
        self._pending += 1
        if p.ecn == 3:
            self._pending_ce += 1
            c.ce_packets += 1
        if psn < self._cack or psn in self._ahead:
            c.duplicates += 1
            return [self._sack(p, now)]
        if not self._place(p):
            return [self._nack(p, NackCode.ACCESS, now)]
        self._received(psn)
        # beyond the bitmap a SACK's `ref` is a packet's only acknowledgement: without it
        # the sender would time out (and resend) what arrived behind a hole
        if flags & F_ACK_REQ or self._pending >= self.ack_every or psn > self._cack + BITMAP_BITS:
            return [self._sack(p, now)]
        self._last = p
        return []

    def receive_burst(self, packets: list[MrcPacket], i: int, peers: Collection[int] | None,
                      now: float) -> tuple[int, list[MrcPacket]]:
        """packets[i] and those after it of this connection from a sender in `peers`
        (None: any) in, until one that is not; (its index, the answers)."""
        if self._w is not None:
            return self._burst(packets, i, self.conn, peers, now)
        out: list[MrcPacket] = []
        while i < len(packets) and packets[i].conn == self.conn and (
                peers is None or packets[i].src_ip in peers):
            out += self.receive(packets[i], now)
            i += 1
        return i, out

    def _burst(self, packets: list[MrcPacket], i: int, conn: int,
               peers: Collection[int] | None, now: float) -> tuple[int, list[MrcPacket]]:
        """receive_burst on the compiled path, for packets to connection id `conn`."""
        assert self._w is not None
        out: list[MrcPacket] = []
        n = len(packets)
        while i < n:
            mr = self._mr
            i, events, counts, last = self._w.mrc_place(
                self._state, packets, i, conn, peers, self._key,
                None if mr is None else mr.buf, 0 if mr is None else mr.va, self.ack_every)
            self._apply(packets, events, counts, now, out)
            if last >= 0:
                self._last = packets[last]
            if i == n:
                break
            p = packets[i]
            if p.conn != conn or peers is not None and p.src_ip not in peers:
                break
            if p.opcode <= OP_WRITE_IMM and not p.flags & F_TRIMMED and p.rkey != self._key:
                self._key = p.rkey  # its region (None: access NACKs), then place it
                self._region(p.rkey)
                continue
            out += self.receive(p, now)
            i += 1
        return i, out

    def flush(self, now: float) -> list[MrcPacket]:
        """A SACK for what arrived since the last one (the end of a receive burst: the
        sender must not wait for an ACK timeout on a message's tail)."""
        pending = self._sv[1] if self._w is not None else self._pending
        if not pending or self._last is None:
            return []
        return [self._sack(self._last, now)]

    def _region(self, rkey: int) -> MemoryRegion | None:
        """The region of `rkey` if remotely writable (resolved once per R_Key)."""
        mr = self._mr
        if mr is None or mr.rkey != rkey:
            mr = self.memory.region(rkey)
            if mr is not None and Access.REMOTE_WRITE not in mr.access:
                mr = None
            self._mr = mr
        return mr

    def _place(self, p: MrcPacket) -> bool:
        n, va = len(p.payload), p.va
        mr = self._region(p.rkey)
        if mr is None or n != p.length or not mr.va <= va <= va + n <= mr.va + mr.length:
            self.counters.access_errors += 1
            return False
        off = va - mr.va
        mr.buf[off:off + n] = p.payload
        c = self.counters
        c.packets += 1
        c.bytes_placed += n
        self._message(p.msg, n, p.ext, p.opcode, p.imm)
        return True

    def _message(self, msg: int, n: int, ext: int, op: int, imm: int) -> None:
        """`n` more bytes of message `msg` (of `ext` bytes) placed."""
        placed = self._placed.get(msg, 0) + n
        if placed >= ext:
            self._placed.pop(msg, None)
            self.counters.messages_done += 1
            if op == OP_WRITE_IMM:
                self.immediates.append(imm)
        else:
            self._placed[msg] = placed

    def _apply(self, packets: list[MrcPacket], events: list[tuple[int, ...]],
               counts: tuple[int, ...], now: float, out: list[MrcPacket]) -> None:
        """mrc_place's events, in order, and its counts (the compiled path)."""
        c = self.counters
        c.packets += counts[0]
        c.bytes_placed += counts[1]
        c.duplicates += counts[2]
        c.ce_packets += counts[3]
        c.access_errors += counts[4]
        for e in events:
            if e[0] == 0:
                self._message(*e[1:])
            elif e[0] == 1:
                out.append(self._sack(packets[e[1]], now, e[2:]))
            else:
                out.append(self._nack(packets[e[1]], NackCode.ACCESS, now, e[2]))

    def _received(self, psn: int) -> None:
        if psn != self._cack:
            self._ahead.add(psn)
            return
        self._cack += 1
        ahead = self._ahead
        while self._cack in ahead:
            ahead.discard(self._cack)
            self._cack += 1

    def _fields(self) -> tuple[int, int, int, int]:
        """(cack, bitmap, packets, ce) of a SACK now; packets and ce reset."""
        if self._w is not None:
            return self._w.mrc_rx_sack(self._state)
        bitmap, base = 0, self._cack + 1
        if self._ahead:
            for i in range(BITMAP_BITS):
                if base + i in self._ahead:
                    bitmap |= 1 << i
        packets, ce = self._pending, self._pending_ce
        self._pending = self._pending_ce = 0
        return self._cack, bitmap, packets, ce

    def _sack(self, p: MrcPacket, now: float, fields: tuple[int, ...] = ()) -> MrcPacket:
        cack, bitmap, packets, ce = fields or self._fields()
        self._last = None
        self.counters.sacks_sent += 1
        return MrcPacket(MrcOpcode.SACK.value, self.remote_conn, cack % _PSN, 0, p.plane, p.ev,
                         self.counters.messages_done, p.ts, timestamp_us(now), bitmap=bitmap,
                         packets=packets, ce=ce, echo=1 if p.ecn == 3 else 0, ref=p.psn)

    def _nack(self, p: MrcPacket, code: NackCode, now: float, cack: int | None = None
              ) -> MrcPacket:
        self.counters.nacks_sent += 1
        if code in (NackCode.TRIMMED, NackCode.TRIMMED_LASTHOP):
            self.counters.trim_nacks_sent += 1
        ref = self.cack if cack is None else cack
        return MrcPacket(MrcOpcode.NACK, self.remote_conn, p.psn, 0, p.plane, p.ev, p.msg,
                         p.ts, timestamp_us(now), echo=code, ref=ref % _PSN)

    def stats(self) -> dict[str, int]:
        return dict(vars(self.counters))
