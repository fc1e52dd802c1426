"""The responder half of an RC queue pair: in-order acceptance and placement.

Requests are accepted only at the expected PSN (`epsn`). A request behind it
is a duplicate: dropped and re-ACKed (a duplicate READ REQUEST is executed
again, since READ responses are never acknowledged). A request ahead of it
means loss: the first one triggers a single PSN-sequence-error NAK, and no
further NAK is sent until `epsn` arrives.

A retried READ is served again only while it is among the last
`max_dest_rd_atomic` READ REQUESTs accepted (the IRD ring); an older one is
dropped unanswered, as rxe drops it once its resource slot is reused. The
requester's ORD, negotiated to at most the peer's IRD, keeps that from
happening.

With `recv_credits` set (receives posted, as a verbs application does), a
SEND that finds none is refused with an RNR NAK carrying `min_rnr_timer`,
and its PSN is not consumed. Left at None (the engine's KV transfers), any
SEND is accepted.

Everything the responder sends goes through one ordered queue, because an
ACK implicitly acknowledges the READs before it: it must not overtake their
responses. Consecutive ACKs in the queue coalesce into one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from emulator.roce.fastpath import Run, Segment
from emulator.roce.headers import Opcode, Syndrome
from emulator.roce.memory import Access, MemoryTable
from emulator.roce.psn import PSN_MASK, psn_add, psn_diff
from emulator.roce.verbs import (
    MIDDLE,
    OPCODES,
    Completion,
    QpConfig,
    QpCounters,
    WcStatus,
    WrKind,
    packets_for,
    position,
)

_STARTS: dict[int, WrKind] = {Opcode.WRITE_FIRST: WrKind.WRITE, Opcode.WRITE_ONLY: WrKind.WRITE,
           Opcode.SEND_FIRST: WrKind.SEND, Opcode.SEND_ONLY: WrKind.SEND,
           Opcode.READ_REQUEST: WrKind.READ}
_CONTINUES: dict[int, WrKind] = {Opcode.WRITE_MIDDLE: WrKind.WRITE, Opcode.WRITE_LAST: WrKind.WRITE,
              Opcode.SEND_MIDDLE: WrKind.SEND, Opcode.SEND_LAST: WrKind.SEND}
_ENDS = {Opcode.WRITE_ONLY, Opcode.WRITE_LAST, Opcode.SEND_ONLY, Opcode.SEND_LAST}
_READ_OPS = OPCODES[WrKind.READ]
_SYNDROME_ACK = int(Syndrome.ACK)
_new_segment = tuple.__new__  # a Segment from a full tuple, without keyword handling
_WRITE, _WRITE_MIDDLE = WrKind.WRITE, int(Opcode.WRITE_MIDDLE)


@dataclass(slots=True)
class _Inbound:
    """A multi-packet WRITE or SEND being received."""

    kind: WrKind
    dest: memoryview | bytearray  # WRITE: the resolved region slice; SEND: growing buffer
    done: int = 0


@dataclass(slots=True)
class _ReadJob:
    """READ RESPONSE packets still to send for one READ REQUEST."""

    first: int
    src: memoryview
    npkts: int
    msn: int
    sent: int = 0


class Responder:
    def __init__(self, cfg: QpConfig, memory: MemoryTable, counters: QpCounters,
                 complete: Callable[[Completion], None]):
        self.cfg, self.memory, self.counters, self._complete = cfg, memory, counters, complete
        self.epsn = cfg.recv_psn
        self.msn = 0
        self._nak_sent = False
        self._dup_acked = False
        self._unacked = 0
        self._msg: _Inbound | None = None
        self._out: deque[Segment | _ReadJob] = deque()
        self._reads: deque[tuple[int, int]] = deque()  # (first PSN, PSNs) of the IRD ring
        self.recv_credits: int | None = None  # receives posted; None: unlimited

    def post_recv(self, n: int = 1) -> None:
        """Post `n` receives (switches from unlimited to counted receives)."""
        self.recv_credits = (self.recv_credits or 0) + n

    @property
    def idle(self) -> bool:
        return not self._out

    # -- receive -----------------------------------------------------------

    def on_request(self, seg: Segment) -> None:
        if seg.psn == self.epsn:
            msg = self._msg
            if (msg is not None and seg.opcode == _WRITE_MIDDLE and msg.kind is _WRITE
                    and self._place_middle(msg, seg.payload)):
                self._accepted(seg.ackreq)
            else:
                self._accept(seg)
        elif psn_diff(seg.psn, self.epsn) < 0:
            self._duplicate(seg)
        else:
            self.counters.out_of_sequence += 1
            if not self._nak_sent:
                self._nak_sent = True
                self._queue_nak(Syndrome.NAK_PSN_SEQUENCE_ERROR, self.epsn)

    def burst_target(self, src_ip: int) -> list[int | memoryview | bytearray] | None:
        """Where the compiled receiver may place in-order WRITE MIDDLE payloads
        itself (`_wire.Receiver.recv`'s target list), or None: no WRITE is open."""
        msg = self._msg
        if msg is None or msg.kind is not _WRITE:
            return None
        return [_WRITE_MIDDLE, src_ip, self.epsn, msg.dest, msg.done, self.cfg.mtu, 1, 0, 0]

    def burst_placed(self, target: list) -> None:
        """Book what the compiled receiver placed: as many `_place_middle`s, with
        their ACK (every `ack_every` packets) coalesced into one."""
        n = target[7]
        if not n or self._msg is None:
            return
        self.epsn, self._msg.done = target[2], target[4]
        self._nak_sent = self._dup_acked = False
        self.counters.rx_packets += n
        self.counters.rx_bytes += target[8]
        self._unacked += n
        if self._unacked >= self.cfg.ack_every:
            self._queue_ack()

    def _accept(self, seg: Segment) -> None:
        kind = _STARTS.get(seg.opcode) if self._msg is None else _CONTINUES.get(seg.opcode)
        if kind is None or (self._msg is not None and kind is not self._msg.kind):
            self._refuse(Syndrome.NAK_INVALID_REQUEST, seg.psn)
            return
        used = self._read(seg) if kind is WrKind.READ else self._place(seg, kind)
        if not used:
            return
        self._accepted(seg.ackreq, used, kind is WrKind.READ)

    def _accepted(self, ackreq: bool, used: int = 1, read: bool = False) -> None:
        """Book an accepted request of `used` PSNs; ACK on AckReq or every
        `ack_every` packets (a READ's responses acknowledge it: count afresh)."""
        self.epsn = (self.epsn + used) & PSN_MASK
        self._nak_sent = self._dup_acked = False
        self.counters.rx_packets += 1
        self._unacked = 0 if read else self._unacked + 1
        if ackreq or self._unacked >= self.cfg.ack_every:
            self._queue_ack()

    def _place_middle(self, msg: _Inbound, payload: bytes | memoryview) -> bool:
        """The hot path: a full-MTU WRITE MIDDLE continuing `msg`, placed.
        False (nothing done) if it needs the full checks of `_place`."""
        n, done = len(payload), msg.done
        if n != self.cfg.mtu or done + n > len(msg.dest):
            return False
        msg.dest[done:done + n] = payload
        msg.done = done + n
        self.counters.rx_bytes += n
        return True

    def _place(self, seg: Segment, kind: WrKind) -> int:
        """Put WRITE/SEND payload in place; 1 PSN used, or 0 if refused (NAK queued)."""
        msg = self._msg or self._open(seg, kind)
        if msg is None:
            return 0
        n, mtu, end = len(seg.payload), self.cfg.mtu, seg.opcode in _ENDS
        limit = len(msg.dest) if kind is WrKind.WRITE else self.cfg.max_send
        if (n != mtu and not end) or n > mtu or msg.done + n > limit or (
                end and kind is WrKind.WRITE and msg.done + n != limit):
            self._msg = None
            self._refuse(Syndrome.NAK_INVALID_REQUEST, seg.psn)
            return 0
        if kind is WrKind.WRITE:
            msg.dest[msg.done:msg.done + n] = seg.payload
        else:
            msg.dest += seg.payload  # type: ignore[operator]
        msg.done += n
        self.counters.rx_bytes += n
        self._msg = None if end else msg
        if end:
            self.msn += 1
            if kind is WrKind.SEND:
                self._complete(Completion(0, WrKind.RECV, WcStatus.SUCCESS, msg.done,
                                          bytes(msg.dest)))
        return 1

    def _open(self, seg: Segment, kind: WrKind) -> _Inbound | None:
        if kind is WrKind.SEND:
            if self.recv_credits is not None:
                if self.recv_credits <= 0:
                    self.counters.rnr_naks_tx += 1
                    self._nak_sent = True  # what follows is out of sequence: no PSN NAK
                    self._queue_nak(Syndrome.RNR_NAK | self.cfg.min_rnr_timer, seg.psn)
                    return None
                self.recv_credits -= 1
            return _Inbound(kind, bytearray())
        dest = self.memory.resolve(seg.rkey, seg.va, seg.dma_length, Access.REMOTE_WRITE)
        if dest is None:
            self._refuse(Syndrome.NAK_REMOTE_ACCESS_ERROR, seg.psn)
        return None if dest is None else _Inbound(kind, dest)

    def _read(self, seg: Segment) -> int:
        """Queue the responses of a READ REQUEST; PSNs used, or 0 if refused."""
        src = self.memory.resolve(seg.rkey, seg.va, seg.dma_length, Access.REMOTE_READ)
        if src is None:
            self._refuse(Syndrome.NAK_REMOTE_ACCESS_ERROR, seg.psn)
            return 0
        self.msn += 1
        npkts = packets_for(len(src), self.cfg.mtu)
        self._out.append(_ReadJob(seg.psn, src, npkts, self.msn))
        self._reads.append((seg.psn, npkts))
        if len(self._reads) > self.cfg.max_dest_rd_atomic:
            self._reads.popleft()  # that slot is reused: its READ can no longer be retried
        return npkts

    def _duplicate(self, seg: Segment) -> None:
        self.counters.duplicates += 1
        if seg.opcode == Opcode.READ_REQUEST:
            self._reread(seg)
        elif seg.ackreq or not self._dup_acked:
            self._dup_acked = True
            self._queue_ack()

    def _reread(self, seg: Segment) -> None:
        """Serve a repeated READ REQUEST again: its responses were lost.

        The requester went back N, so whatever is queued at or after this
        PSN will be asked for again: cut it from the queue instead of
        sending it twice, and keep what comes before.
        """
        if not any(0 <= psn_diff(seg.psn, first) < n for first, n in self._reads):
            self.counters.stale_read_requests += 1
            return
        src = self.memory.resolve(seg.rkey, seg.va, seg.dma_length, Access.REMOTE_READ)
        npkts = packets_for(seg.dma_length, self.cfg.mtu)
        if src is None or psn_diff(psn_add(seg.psn, npkts), self.epsn) > 0:
            self._refuse(Syndrome.NAK_REMOTE_ACCESS_ERROR if src is None
                         else Syndrome.NAK_INVALID_REQUEST, seg.psn)
            return
        self._truncate_at(seg.psn)
        self._out.append(_ReadJob(seg.psn, src, npkts, self.msn))

    def _truncate_at(self, psn: int) -> None:
        kept: deque[Segment | _ReadJob] = deque()
        for item in self._out:
            start = item.first if isinstance(item, _ReadJob) else item.psn
            if psn_diff(start, psn) >= 0:
                continue
            if isinstance(item, _ReadJob):
                item.npkts = min(item.npkts, psn_diff(psn, item.first))
                if item.sent >= item.npkts:
                    continue
            kept.append(item)
        self._out = kept

    def _refuse(self, syndrome: Syndrome, psn: int) -> None:
        if syndrome == Syndrome.NAK_REMOTE_ACCESS_ERROR:
            self.counters.access_errors += 1
        else:
            self.counters.invalid_requests += 1
        self._queue_nak(syndrome, psn)

    # -- transmit ----------------------------------------------------------

    def _queue_ack(self) -> None:
        ack = Segment(Opcode.ACK, self.cfg.remote_qpn, psn_add(self.epsn, -1),
                      syndrome=Syndrome.ACK, msn=self.msn)
        tail = self._out[-1] if self._out else None
        if isinstance(tail, Segment) and tail.syndrome == Syndrome.ACK:
            self._out[-1] = ack  # coalesce: the newer ACK covers the older
        else:
            self._out.append(ack)
        self._unacked = 0

    def _queue_nak(self, syndrome: int, psn: int) -> None:
        self._out.append(Segment(Opcode.ACK, self.cfg.remote_qpn, psn,
                                 syndrome=syndrome, msn=self.msn))

    def poll(self, budget: int, out: list[Segment | Run], runs: bool = False) -> int:
        """Append up to `budget` ACK/NAK/READ RESPONSE packets; return how many.
        `runs`: full-MTU MIDDLE responses as one `Run` each (the compiled path's burst)."""
        left = budget
        while self._out and left > 0:
            item = self._out[0]
            if isinstance(item, Segment):
                self._out.popleft()
                out.append(item)
                left -= 1
                if item.syndrome == Syndrome.ACK:
                    self.counters.acks_tx += 1
                else:
                    self.counters.naks_tx += 1
                continue
            sent = item.sent
            if self._respond(item, left, out, runs):
                self._out.popleft()
            left -= item.sent - sent
        return budget - left

    def _respond(self, job: _ReadJob, budget: int, out: list[Segment | Run],
                 runs: bool = False) -> bool:
        """Emit up to `budget` responses of `job`; True when it is finished."""
        mtu, ops, qpn, msn = self.cfg.mtu, _READ_OPS, self.cfg.remote_qpn, job.msn
        src, first, npkts, last = job.src, job.first, job.npkts, job.npkts - 1
        start = job.sent
        stop = min(npkts, start + budget)
        lo, hi = max(start, 1), min(stop, last)
        if runs and hi - lo > 2:  # the MIDDLE responses as one Run, the rest one by one
            if start == 0:
                self._respond(job, 1, out)
            out.append(Run(ops[MIDDLE], qpn, (first + lo) & PSN_MASK, hi - lo, -1, mtu,
                           src[lo * mtu:hi * mtu]))
            job.sent = hi
            if stop > hi:
                self._respond(job, stop - hi, out)
            return job.sent >= npkts
        append = out.append
        for i in range(start, stop):
            payload = src[i * mtu:i * mtu + mtu]
            psn = (first + i) & PSN_MASK
            if 0 < i < last:  # MIDDLE: no AETH
                append(_new_segment(Segment, (ops[MIDDLE], qpn, psn, False, 0, 0, 0, 0, 0,
                                              payload, False, 0, 0)))
            else:  # FIRST, LAST, ONLY carry an AETH
                append(_new_segment(Segment, (ops[position(i, npkts)], qpn, psn, False, 0, 0,
                                              0, _SYNDROME_ACK, msn, payload, False, 0, 0)))
        job.sent = max(start, stop)
        return job.sent >= npkts
