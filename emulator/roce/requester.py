"""The requester half of an RC queue pair: segmentation, window, go-back-N.

Work requests get their PSNs when posted. Three pointers walk the PSN space:
`una` (oldest unacknowledged), `nxt` (next to transmit) and `tail` (first
PSN of the next work request). Packets are never stored: any PSN's packet is
rebuilt from its work request, so going back N is just `nxt = una`.

A READ of n packets consumes n PSNs (one per response packet) but sends one
READ REQUEST per `read_chunk` PSNs, so the send window also paces the
responses of a large READ. Response data lands in the requester's buffer at
(PSN - first PSN) * MTU.

At most `max_rd_atomic` READ REQUESTs are outstanding (the initiator depth,
ORD): the next one waits, and everything posted after it with it, as on a
NIC. An RNR NAK (the peer had no receive posted) holds the QP for the RNR
timer it carries, then resends from its PSN; `rnr_retry` bounds how many in
a row (7: forever).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from emulator.errors import EngineError
from emulator.roce.fastpath import Run, Segment
from emulator.roce.headers import AckKind, Opcode, Syndrome
from emulator.roce.psn import PSN_MASK, psn_add, psn_diff
from emulator.roce.verbs import (
    LAST,
    MIDDLE,
    ONLY,
    OPCODES,
    RNR_TIMER_S,
    Completion,
    QpConfig,
    QpCounters,
    WcStatus,
    WrKind,
    packets_for,
    position,
)

_NAK_STATUS: dict[int, WcStatus] = {
    Syndrome.NAK_REMOTE_ACCESS_ERROR: WcStatus.REMOTE_ACCESS_ERROR,
    Syndrome.NAK_INVALID_REQUEST: WcStatus.REMOTE_INVALID_REQUEST,
    Syndrome.NAK_REMOTE_OPERATIONAL_ERROR: WcStatus.REMOTE_OPERATIONAL_ERROR,
}
# PSN comparisons hold while less than 2**23 PSNs are in play; stay well inside.
MAX_QUEUED_PSNS = 1 << 22
_new_segment = tuple.__new__  # a Segment from a full tuple, without keyword handling
# Enum members as plain module constants: the hot loops compare them per packet.
_READ = WrKind.READ
_READ_MIDDLE = int(Opcode.READ_RESPONSE_MIDDLE)
_WRITE_FIRST, _WRITE_ONLY = int(Opcode.WRITE_FIRST), int(Opcode.WRITE_ONLY)
_RESPONSE_STARTS = frozenset({int(Opcode.READ_RESPONSE_FIRST), int(Opcode.READ_RESPONSE_ONLY)})
_ACK_KIND, _NAK_KIND, _RNR_KIND = int(AckKind.ACK), int(AckKind.NAK), int(AckKind.RNR_NAK)


@dataclass(slots=True)
class _Wr:
    wr_id: int
    kind: WrKind
    first: int  # first PSN
    npkts: int  # PSNs consumed
    local: memoryview  # source (WRITE/SEND) or destination (READ)
    va: int = 0
    rkey: int = 0
    opcodes: tuple[int, ...] = ()  # by position: ONLY, FIRST, MIDDLE, LAST

    def holds(self, psn: int) -> bool:
        return 0 <= psn_diff(psn, self.first) < self.npkts


class Requester:
    """Sends work requests and retires them as ACKs and READ responses arrive."""

    def __init__(self, cfg: QpConfig, counters: QpCounters,
                 complete: Callable[[Completion], None]):
        self.cfg, self.counters, self._complete = cfg, counters, complete
        self.una = self.nxt = self.tail = self._high = cfg.send_psn
        self._wrs: deque[_Wr] = deque()
        self._tx = 0  # index in _wrs of the work request holding nxt
        self._rto = cfg.rto
        self._retries = 0
        self._deadline: float | None = None
        self._nak_hold: int | None = None  # una at the last implied NAK
        self._reads: deque[int] = deque()  # end PSNs of the READ REQUESTs outstanding (ORD)
        self._rnr_until: float | None = None  # held by an RNR NAK until then
        self._rnr_retries = 0
        self.failed: WcStatus | None = None

    # -- posting -----------------------------------------------------------

    def post(self, wr_id: int, kind: WrKind, local: memoryview, va: int = 0,
             rkey: int = 0) -> None:
        npkts = packets_for(len(local), self.cfg.mtu)
        if ((self.tail - self.una) & PSN_MASK) + npkts > MAX_QUEUED_PSNS:
            raise EngineError(f"QP {self.cfg.qpn:#x}: more than {MAX_QUEUED_PSNS} packets "
                              "queued; wait for completions before posting more")
        self._wrs.append(_Wr(wr_id, kind, self.tail, npkts, local, va, rkey, OPCODES[kind]))
        self.tail = psn_add(self.tail, npkts)

    @property
    def idle(self) -> bool:
        return not self._wrs

    def next_deadline(self) -> float | None:
        return self._rnr_until if self._rnr_until is not None else self._deadline

    # -- transmit ----------------------------------------------------------

    def poll(self, now: float, budget: int, out: list[Segment | Run], runs: bool = False) -> int:
        """Append up to `budget` request packets the window allows; return how many.
        `runs`: full-MTU MIDDLE packets as one `Run` each (the compiled path's burst)."""
        if self._rnr_until is not None:
            if now < self._rnr_until:
                return 0
            self._rnr_until = None
        if self._deadline is not None and now >= self._deadline:
            self._on_timeout(now)
        if self.failed is not None:
            return 0
        nxt, tail, start = self.nxt, self.tail, budget
        # nxt is never behind una, so the masked difference is the distance.
        room = self.cfg.window - ((nxt - self.una) & PSN_MASK)
        while budget > 0 and room > 0 and nxt != tail:
            wr = self._wr_at(nxt)
            if wr.kind is _READ:
                if len(self._reads) >= self.cfg.max_rd_atomic:
                    break  # ORD reached: wait for responses
                seg, used = self._read_request(wr, nxt)
                out.append(seg)
                self._reads.append((nxt + used) & PSN_MASK)
                sent = 1
            else:
                used = sent = self._data_packets(wr, nxt, min(budget, room), out, runs)
            behind = psn_diff(self._high, nxt)  # PSNs here that went out before
            if behind > 0:
                self.counters.retransmitted_packets += min(sent, behind)
            nxt = (nxt + used) & PSN_MASK
            if psn_diff(nxt, self._high) > 0:
                self._high = nxt
            budget -= sent
            room -= used
            if self._deadline is None:
                self._deadline = now + self._rto
        self.nxt = nxt
        return start - budget

    def _wr_at(self, psn: int) -> _Wr:
        """The work request holding `psn`, scanning on from the last one used."""
        while not self._wrs[self._tx].holds(psn):
            self._tx += 1
        return self._wrs[self._tx]

    def _read_request(self, wr: _Wr, psn: int) -> tuple[Segment, int]:
        """The READ REQUEST for the chunk of `wr` at `psn`, and the PSNs it consumes."""
        mtu, index, chunk = self.cfg.mtu, (psn - wr.first) & PSN_MASK, self.cfg.read_chunk
        end = min(wr.npkts, (index // chunk + 1) * chunk)
        length = min(len(wr.local), end * mtu) - index * mtu
        return Segment(Opcode.READ_REQUEST, self.cfg.remote_qpn, psn, False,
                       wr.va + index * mtu, wr.rkey, length), end - index

    def _data_packets(self, wr: _Wr, psn: int, limit: int, out: list[Segment | Run],
                      runs: bool = False) -> int:
        """Append up to `limit` WRITE/SEND packets of `wr` from `psn` on; return how many.

        The hot loop of the sender: MIDDLE packets are built inline (or as one
        Run); AckReq goes on the last packet of the message and on the one
        filling the window.
        """
        if runs and limit > 3:
            return self._data_runs(wr, psn, limit, out)
        mtu, npkts, first, local = self.cfg.mtu, wr.npkts, wr.first, wr.local
        rqpn, ops, last = self.cfg.remote_qpn, wr.opcodes, npkts - 1
        fill = (self.una + self.cfg.window - 1) & PSN_MASK
        index = (psn - first) & PSN_MASK
        stop = min(npkts, index + limit)
        middle, append = ops[MIDDLE], out.append
        for i in range(index, stop):
            p = (first + i) & PSN_MASK
            if 0 < i < last:
                append(_new_segment(Segment, (middle, rqpn, p, p == fill, 0, 0, 0, 0, 0,
                                              local[i * mtu:i * mtu + mtu], False, 0, 0)))
                continue
            pos = position(i, npkts)
            opcode = ops[pos]
            reth = opcode == _WRITE_FIRST or opcode == _WRITE_ONLY
            append(_new_segment(Segment, (
                opcode, rqpn, p, pos == ONLY or pos == LAST or p == fill,
                wr.va if reth else 0, wr.rkey if reth else 0, len(local) if reth else 0,
                0, 0, local[i * mtu:i * mtu + mtu], False, 0, 0)))
        return stop - index

    def _data_runs(self, wr: _Wr, psn: int, limit: int, out: list[Segment | Run]) -> int:
        """As `_data_packets`, with the MIDDLE packets in one `Run`: the FIRST and
        LAST packets stay Segments (they carry a RETH or AckReq of their own)."""
        mtu, last = self.cfg.mtu, wr.npkts - 1
        index = (psn - wr.first) & PSN_MASK
        stop = min(wr.npkts, index + limit)
        lo, hi = max(index, 1), min(stop, last)
        if hi - lo < 2:
            return self._data_packets(wr, psn, limit, out)
        if index == 0:
            self._data_packets(wr, psn, 1, out)
        out.append(Run(wr.opcodes[MIDDLE], self.cfg.remote_qpn, (wr.first + lo) & PSN_MASK,
                       hi - lo, (self.una + self.cfg.window - 1) & PSN_MASK, mtu,
                       wr.local[lo * mtu:hi * mtu]))
        if stop > last:
            self._data_packets(wr, (wr.first + last) & PSN_MASK, 1, out)
        return stop - index

    # -- receive -----------------------------------------------------------

    def on_ack(self, seg: Segment, now: float) -> None:
        kind = seg.syndrome >> 5 & 3  # an AckKind, compared as int on this path
        if kind == _ACK_KIND:
            self.counters.acks_rx += 1
            if not self._acked_through(seg.psn, now):
                self.counters.unexpected_acks += 1
            return
        if kind == _RNR_KIND and self._outstanding(seg.psn):
            self._on_rnr(seg, now)
            return
        if kind != _NAK_KIND or not self._outstanding(seg.psn):
            self.counters.unexpected_acks += 1
            return
        self.counters.naks_rx += 1
        self._acked_through(psn_add(seg.psn, -1), now)
        if seg.syndrome == Syndrome.NAK_PSN_SEQUENCE_ERROR:
            self._go_back(self.una)  # == seg.psn unless a READ before it is incomplete
        else:
            self._fail(_NAK_STATUS.get(seg.syndrome, WcStatus.REMOTE_OPERATIONAL_ERROR))

    def on_read_response(self, seg: Segment, now: float) -> None:
        psn, payload = seg.psn, seg.payload
        if seg.opcode in _RESPONSE_STARTS:
            self._acked_through(psn_add(psn, -1), now)  # implicit ACK of earlier requests
        if psn != self.una:
            if psn_diff(psn, self.una) < 0:
                self.counters.duplicates += 1
            else:
                self.counters.out_of_sequence += 1
                self._implied_nak()
            return
        wr = self._wrs[0] if self._wrs else None
        mtu = self.cfg.mtu
        offset = ((psn - wr.first) & PSN_MASK) * mtu if wr else 0
        n = len(payload)
        if wr is None or wr.kind is not _READ or n != min(mtu, len(wr.local) - offset):
            self.counters.unexpected_acks += 1
            return
        wr.local[offset:offset + n] = payload
        self.counters.rx_packets += 1
        self.counters.rx_bytes += n
        self._advance((psn + 1) & PSN_MASK, now)

    def burst_target(self, src_ip: int) -> list[int | memoryview] | None:
        """Where the compiled receiver may place in-order READ RESPONSE MIDDLE
        payloads itself (`_wire.Receiver.recv`'s target list), or None."""
        wr = self._wrs[0] if self._wrs else None
        if wr is None or wr.kind is not _READ or not wr.holds(self.una):
            return None
        offset = ((self.una - wr.first) & PSN_MASK) * self.cfg.mtu
        return [_READ_MIDDLE, src_ip, self.una, wr.local, offset, self.cfg.mtu, 1, 0, 0]

    def burst_placed(self, target: list, now: float) -> None:
        """Book what the compiled receiver placed: as many `on_read_response`s."""
        if target[7]:
            self.counters.rx_packets += target[7]
            self.counters.rx_bytes += target[8]
            self._advance(target[2], now)

    def _on_rnr(self, seg: Segment, now: float) -> None:
        """The responder had no receive for the request at `seg.psn`: what is
        before it is acknowledged; hold for the RNR timer, then resend from it."""
        self.counters.rnr_naks_rx += 1
        self._acked_through(psn_add(seg.psn, -1), now)
        if self.failed is not None:
            return
        self._rnr_retries += 1
        if self.cfg.rnr_retry != 7 and self._rnr_retries > self.cfg.rnr_retry:
            self._fail(WcStatus.RNR_RETRY_EXCEEDED)
            return
        self._rnr_until = now + RNR_TIMER_S[seg.syndrome & 0x1F]
        self._deadline = None  # no retransmission timer while held
        self._go_back(self.una)

    def _outstanding(self, psn: int) -> bool:
        """Sent at least once and not yet acknowledged (a go-back may have
        moved `nxt` behind it, so compare with the highest PSN ever sent)."""
        return 0 <= psn_diff(psn, self.una) < psn_diff(self._high, self.una)

    def _acked_through(self, psn: int, now: float) -> bool:
        """Cumulative ACK of every PSN up to `psn`; False if `psn` was never sent."""
        target = psn_add(psn, 1)
        gain = psn_diff(target, self.una)
        if gain > psn_diff(self._high, self.una):
            return False
        if gain <= 0:
            return True  # old or repeated ACK
        clipped = self._clip_at_read(target)
        self._advance(clipped, now)
        if clipped != target:  # the ACK went past a READ whose responses are missing
            self._implied_nak()
        return True

    def _clip_at_read(self, target: int) -> int:
        """An ACK cannot retire a READ: only its response data can."""
        for wr in self._wrs:
            if psn_diff(wr.first, target) >= 0:
                break
            if wr.kind is WrKind.READ:
                return wr.first if psn_diff(wr.first, self.una) > 0 else self.una
        return target

    def _advance(self, una: int, now: float) -> None:
        if psn_diff(una, self.una) <= 0:
            return
        self.una = una
        self._retries, self._rto, self._nak_hold = 0, self.cfg.rto, None
        self._rnr_retries = 0
        reads = self._reads
        while reads and psn_diff(una, reads[0]) >= 0:
            reads.popleft()
        wrs = self._wrs
        while wrs and psn_diff(una, wrs[0].first) >= wrs[0].npkts:
            wr = wrs.popleft()
            self._tx = max(0, self._tx - 1)
            self._complete(Completion(wr.wr_id, wr.kind, WcStatus.SUCCESS, len(wr.local)))
        if psn_diff(self.nxt, una) < 0:  # responses overtook a go-back
            self.nxt, self._tx = una, 0
        self._deadline = None if una == self.nxt else now + self._rto

    def _implied_nak(self) -> None:
        """Go back to `una` once per stall: a READ response or ACK skipped data."""
        if self._nak_hold == self.una:
            return
        self._nak_hold = self.una
        self.counters.implied_naks += 1
        self._go_back(self.una)

    def _go_back(self, psn: int) -> None:
        self.nxt, self._tx = psn, 0
        self._reads.clear()  # every READ from una on will be asked for again

    def _on_timeout(self, now: float) -> None:
        if self.una == self.nxt:
            self._deadline = None
            return
        self.counters.timeouts += 1
        self._retries += 1
        if self._retries > self.cfg.retry_limit:
            self._fail(WcStatus.RETRY_EXCEEDED)
            return
        self._rto = min(self._rto * 2, self.cfg.rto_max)
        self._deadline = now + self._rto
        self._nak_hold = None
        self._go_back(self.una)

    def _fail(self, status: WcStatus) -> None:
        """Complete the failing request with `status`, flush the rest (IBTA 10.8)."""
        self.failed, self._deadline, self._rnr_until = status, None, None
        while self._wrs:
            wr = self._wrs.popleft()
            self._complete(Completion(wr.wr_id, wr.kind, status, 0))
            status = WcStatus.FLUSHED
        self.una = self.nxt = self.tail
