"""The receiving half of an MRC connection (sans-IO): place in any order, SACK, NACK.

Every data packet carries its own RETH, so it is placed where it belongs the
moment it arrives, whatever came before. A message is complete when every one
of its bytes is placed (duplicates place nothing). The receiver acknowledges
with SACKs (cumulative PSN + a 64-bit bitmap + the ECN marks seen), answers a
trimmed packet with a TRIM NACK and every probe with a probe reply on its EV.
"""

from __future__ import annotations

from dataclasses import dataclass

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


class MrcReceiver:
    def __init__(self, conn: int, remote_conn: int, memory: MemoryTable, ack_every: int = 16):
        self.conn, self.remote_conn, self.memory = conn, remote_conn, memory
        self.ack_every = ack_every
        self.counters = ReceiverCounters()
        self.cack = 0  # every PSN below it was received
        self._ahead: set[int] = set()
        self._placed: dict[int, int] = {}  # message number -> bytes placed so far
        self._pending = self._pending_ce = 0
        self._last: MrcPacket | None = None  # the last data packet not yet acknowledged
        self._mr: MemoryRegion | None = None
        self.immediates: list[int] = []

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
        c = self.counters
        psn = unwrap(p.psn, self.cack)
        self._pending += 1
        if p.ecn == 3:
            self._pending_ce += 1
            c.ce_packets += 1
        if psn < self.cack or psn in self._ahead:
            c.duplicates += 1
            return [self._sack(p, now)]
        if not self._place(p):
            return [self._nack(p, NackCode.ACCESS, now)]
        self._received(psn)
        # beyond the bitmap a SACK's `ref` is a packet's only acknowledgement: without it
        # the sender would time out (and resend) what arrived behind a hole
        if flags & F_ACK_REQ or self._pending >= self.ack_every or psn > self.cack + BITMAP_BITS:
            return [self._sack(p, now)]
        self._last = p
        return []

    def flush(self, now: float) -> list[MrcPacket]:
        """A SACK for what arrived since the last one (the end of a receive burst: the
        sender must not wait for an ACK timeout on a message's tail)."""
        if not self._pending or self._last is None:
            return []
        return [self._sack(self._last, now)]

    def _place(self, p: MrcPacket) -> bool:
        n, va = len(p.payload), p.va
        mr = self._mr
        if mr is None or mr.rkey != p.rkey:  # the region, resolved once per R_Key
            mr = self.memory.region(p.rkey)
            if mr is not None and Access.REMOTE_WRITE not in mr.access:
                mr = None
            self._mr = mr
        if mr is None or n != p.length or not mr.va <= va <= va + n <= mr.va + mr.length:
            self.counters.access_errors += 1
            return False
        off = va - mr.va
        mr.buf[off:off + n] = p.payload
        c = self.counters
        c.packets += 1
        c.bytes_placed += n
        placed = self._placed.get(p.msg, 0) + n
        if placed >= p.ext:
            self._placed.pop(p.msg, None)
            c.messages_done += 1
            if p.opcode == OP_WRITE_IMM:
                self.immediates.append(p.imm)
        else:
            self._placed[p.msg] = placed
        return True

    def _received(self, psn: int) -> None:
        if psn != self.cack:
            self._ahead.add(psn)
            return
        self.cack += 1
        ahead = self._ahead
        while self.cack in ahead:
            ahead.discard(self.cack)
            self.cack += 1

    def _sack(self, p: MrcPacket, now: float) -> MrcPacket:
        bitmap, base = 0, self.cack + 1
        if self._ahead:
            for i in range(BITMAP_BITS):
                if base + i in self._ahead:
                    bitmap |= 1 << i
        packets, ce = self._pending, self._pending_ce
        self._pending = self._pending_ce = 0
        self._last = None
        self.counters.sacks_sent += 1
        return MrcPacket(MrcOpcode.SACK.value, self.remote_conn, self.cack % _PSN, 0, p.plane, p.ev,
                         self.counters.messages_done, p.ts, timestamp_us(now), bitmap=bitmap,
                         packets=packets, ce=ce, echo=1 if p.ecn == 3 else 0, ref=p.psn)

    def _nack(self, p: MrcPacket, code: NackCode, now: float) -> MrcPacket:
        self.counters.nacks_sent += 1
        if code in (NackCode.TRIMMED, NackCode.TRIMMED_LASTHOP):
            self.counters.trim_nacks_sent += 1
        return MrcPacket(MrcOpcode.NACK, self.remote_conn, p.psn, 0, p.plane, p.ev, p.msg,
                         p.ts, timestamp_us(now), echo=code, ref=self.cack % _PSN)

    def stats(self) -> dict[str, int]:
        return dict(vars(self.counters))
