"""A sans-IO RoCEv2 Reliable Connection queue pair.

No sockets and no clock inside: the caller passes `now` (seconds, any
monotonic origin) into every call, feeds received segments to `receive`,
sends what `poll` returns, and calls `poll` again by `next_deadline()` so
the retransmission timer can fire. That makes the whole protocol testable
with a simulated wire, and lets one engine process drive many QPs.

    qp = QueuePair(QpConfig(qpn=0x11, remote_qpn=0x12), memory)
    qp.post_write(1, data, remote_va, rkey)
    for seg in qp.poll(now, budget=64): send(seg)
    qp.receive(incoming_segment, now)
    for wc in qp.completions(): ...

Both halves live in one QP, as in RC: the requester (requester.py) sends
this side's work requests; the responder (responder.py) serves the peer's.
"""

from __future__ import annotations

from operator import itemgetter

from emulator.roce.errors import AccessError, QpStateError
from emulator.roce.fastpath import Run, Segment
from emulator.roce.headers import Ecn, Opcode
from emulator.roce.memory import MemoryTable
from emulator.roce.requester import Requester
from emulator.roce.responder import Responder
from emulator.roce.verbs import Completion, QpConfig, QpCounters, QpState, WrKind

_RESPONSES = frozenset({Opcode.READ_RESPONSE_FIRST, Opcode.READ_RESPONSE_MIDDLE,
                        Opcode.READ_RESPONSE_LAST, Opcode.READ_RESPONSE_ONLY})
# Enum members as plain ints: `receive` compares them once per packet.
_ACK, _CNP, _CE = int(Opcode.ACK), int(Opcode.CNP), int(Ecn.CE)
_READ_MIDDLE = int(Opcode.READ_RESPONSE_MIDDLE)
_payload = itemgetter(Segment._fields.index("payload"))


class QueuePair:
    """One end of an RC connection. See the module docstring for the loop."""

    def __init__(self, config: QpConfig, memory: MemoryTable):
        self.config = config
        self.counters = QpCounters()
        self._done: list[Completion] = []
        self.requester = Requester(config, self.counters, self._done.append)
        self.responder = Responder(config, memory, self.counters, self._done.append)
        self._last_cnp = float("-inf")
        self._cnp_due = False

    @property
    def qpn(self) -> int:
        return self.config.qpn

    @property
    def state(self) -> QpState:
        return QpState.READY if self.requester.failed is None else QpState.ERROR

    @property
    def idle(self) -> bool:
        """Nothing posted is unfinished and nothing is waiting to be sent."""
        return self.requester.idle and self.responder.idle and not self._cnp_due

    # -- work requests -----------------------------------------------------

    def post_write(self, wr_id: int, data: bytes | bytearray | memoryview,
                   remote_va: int, rkey: int) -> None:
        """RDMA WRITE `data` to the peer's memory at (remote_va, rkey)."""
        self._post(wr_id, WrKind.WRITE, memoryview(data).cast("B"), remote_va, rkey)

    def post_read(self, wr_id: int, dest: bytearray | memoryview, remote_va: int,
                  rkey: int) -> None:
        """RDMA READ len(dest) bytes from the peer's (remote_va, rkey) into `dest`."""
        view = memoryview(dest).cast("B")
        if view.readonly:
            raise AccessError("READ destination must be writable")
        self._post(wr_id, WrKind.READ, view, remote_va, rkey)

    def post_send(self, wr_id: int, data: bytes | bytearray | memoryview) -> None:
        """SEND a (small) message; the peer gets it as a RECV completion."""
        if len(data) > self.config.max_send:
            raise AccessError(f"SEND of {len(data)} bytes exceeds max_send "
                              f"{self.config.max_send}")
        self._post(wr_id, WrKind.SEND, memoryview(data).cast("B"))

    def post_recv(self, n: int = 1) -> None:
        """Post `n` receives. Until the first call any SEND is accepted (the
        engine's own transfers); after it a SEND finding none gets an RNR NAK."""
        self.responder.post_recv(n)

    def _post(self, wr_id: int, kind: WrKind, local: memoryview, va: int = 0,
              rkey: int = 0) -> None:
        if self.requester.failed is not None:
            raise QpStateError(self.qpn, self.requester.failed.value)
        self.requester.post(wr_id, kind, local, va, rkey)

    # -- the loop ----------------------------------------------------------

    def receive(self, seg: Segment, now: float) -> None:
        """Process one incoming segment addressed to this QP."""
        requester = self.requester
        if requester.failed is not None:
            return
        op = seg.opcode
        if seg.ecn == _CE and op != _CNP:
            self.counters.ce_rx += 1
            self._congestion_seen(now)
        if op == _ACK:
            requester.on_ack(seg, now)
        elif op in _RESPONSES:
            requester.on_read_response(seg, now)
        elif op == _CNP:
            self.counters.cnps_rx += 1  # the reaction point (engine/paced.py, DCQCN) acts on it
        else:
            self.responder.on_request(seg)

    def burst_targets(self, src_ip: int) -> list[list] | None:
        """Where the compiled receiver may place this QP's in-order MIDDLE payloads
        from `src_ip` itself (see `_wire.Receiver.recv`); None: nowhere now."""
        if self.requester.failed is not None:
            return None
        got = [t for t in (self.responder.burst_target(src_ip),
                           self.requester.burst_target(src_ip)) if t is not None]
        return got or None

    def burst_placed(self, targets: list[list], now: float) -> None:
        """Book what was placed, before any segment of this burst is received."""
        for t in targets:
            if t[0] == _READ_MIDDLE:
                self.requester.burst_placed(t, now)
            else:
                self.responder.burst_placed(t)

    def poll(self, now: float, budget: int = 64, runs: bool = False) -> list[Segment]:
        """Up to `budget` segments to send now: CNP, then ACK/NAK/READ
        responses in order, then this side's requests as the window allows.

        With `runs`, full-MTU MIDDLE packets come as `fastpath.Run`s (the
        compiled data path's burst; `fastpath.expand` gives the Segments):
        the list is then typed list[Segment | Run], and `budget` still counts
        packets."""
        out: list[Segment | Run] = []
        if self.requester.failed is not None:
            return out  # type: ignore[return-value]
        left = budget
        if self._cnp_due and left > 0:
            self._cnp_due = False
            self.counters.cnps_tx += 1
            out.append(Segment(Opcode.CNP, self.config.remote_qpn, 0, becn=True))
            left -= 1
        left -= self.responder.poll(left, out, runs)
        left -= self.requester.poll(now, left, out, runs)
        if out:
            self.counters.packets_sent += budget - left
            self.counters.bytes_sent += (sum(len(x.payload) for x in out) if runs
                                         else sum(map(len, map(_payload, out))))
        return out  # type: ignore[return-value]

    def next_deadline(self) -> float | None:
        """When `poll` must be called again even if nothing arrives."""
        return self.requester.next_deadline()

    def completions(self) -> list[Completion]:
        """Completions since the last call, in order."""
        done, self._done[:] = list(self._done), []
        return done

    def _congestion_seen(self, now: float) -> None:
        """Notification point: answer CE marks with at most one CNP per interval."""
        if now - self._last_cnp >= self.config.cnp_interval:
            self._last_cnp = now
            self._cnp_due = True
