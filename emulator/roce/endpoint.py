"""The event loop that connects queue pairs to a `Transport`.

One `Endpoint` per host namespace: it owns the clock (time.monotonic), demuxes
received segments to QPs by destination QPN (and checks the source address),
sends what the QPs produce with the right TOS, and waits in select() only
when no QP has anything to do before its next timer.

One turn (`step`) receives a batch -- what the socket holds, at most
`rx_batch` datagrams (one recvmmsg) so that ACKs are not held back behind a
long receive -- then lets every QP send, building datagrams straight into the transport's
send batch and handing them over with one sendmmsg. The clock is read once
per half turn, not per packet. A turn that moved nothing blocks in select()
until a datagram arrives or the next QP timer is due, so an engine whose
windows are full and who only waits for ACKs sleeps instead of spinning.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from emulator.errors import EngineError
from emulator.roce.fastpath import FrameBuilder, Segment
from emulator.roce.headers import Ecn, udp_source_port
from emulator.roce.rc import QueuePair
from emulator.roce.transport import SLOT_SIZE, Transport
from emulator.roce.verbs import QpConfig

CNP_DSCP = 48  # NVIDIA default: CNPs on their own strict-priority class
BLOCKED_RETRY_S = 0.0005  # how soon a send the kernel refused is tried again
RX_BATCH = 32  # datagrams handled before QPs get a turn to send (their ACKs among it)


def qp_sport(config: QpConfig) -> int:
    """The UDP source port a QP's packets carry: fixed, or rxe's hash of both QPNs."""
    return config.udp_sport or udp_source_port(config.qpn, config.remote_qpn)


@dataclass
class _Flow:
    qp: QueuePair
    peer_ip: str
    peer_addr: int  # peer_ip as the integer `parse` reports in src_ip
    builder: FrameBuilder
    handle: object  # the transport's handle for (builder, peer_ip)


class Endpoint:
    """Drives QPs over one transport. Not thread-safe: one thread runs it.

    `drop` is a fault-injection hook: return True to lose an outgoing
    segment (counted in `injected_drops`) as if the wire had dropped it.
    """

    def __init__(self, transport: Transport, *, dscp: int = 0, ecn: Ecn = Ecn.ECT0,
                 budget: int = 64, drop: Callable[[Segment], bool] | None = None,
                 rx_batch: int = RX_BATCH):
        self.transport = transport
        self.budget = budget
        self.rx_batch = rx_batch
        self.injected_drops = 0
        self.unknown_qp = 0
        self.waits = 0  # turns that blocked in select(): each is a wakeup for the sender's CPU
        self._tos, self._cnp_tos = dscp << 2 | ecn, CNP_DSCP << 2
        self._drop = drop
        self._flows: dict[int, _Flow] = {}
        if transport.on_bad_icrc is None:
            transport.on_bad_icrc = self.note_bad_icrc

    def add(self, qp: QueuePair, peer_ip: str, local_ip: str | None = None) -> None:
        """Start serving `qp`, whose peer QP lives at `peer_ip`; it sends from `local_ip`
        (a multi-NIC host's rail address), by default the transport's address."""
        sport = qp_sport(qp.config)
        builder = FrameBuilder(local_ip or self.transport.local_ip, peer_ip, sport,
                               max_payload=qp.config.mtu)
        if builder.max_datagram > SLOT_SIZE:
            raise EngineError(f"QP {qp.qpn:#x}: datagrams of {builder.max_datagram} bytes "
                              f"do not fit the {SLOT_SIZE}-byte send slots")
        addr = int.from_bytes(socket.inet_aton(peer_ip), "big")
        self._flows[qp.qpn] = _Flow(qp, peer_ip, addr, builder,
                                    self.transport.flow(builder, peer_ip))

    def remove(self, qpn: int) -> QueuePair | None:
        """Stop serving a QP (segments for it then count as `unknown_qp`)."""
        flow = self._flows.pop(qpn, None)
        return None if flow is None else flow.qp

    def note_bad_icrc(self, seg: Segment) -> None:
        """Transport callback: attribute a corrupted datagram to its QP if known."""
        flow = self._flows.get(seg.dest_qp)
        if flow is not None:
            flow.qp.counters.bad_icrc += 1

    def step(self, max_wait: float = 0.0) -> int:
        """One turn: receive, let every QP send; wait up to `max_wait` (capped
        at the next QP timer) only if that turn moved nothing. Returns the
        number of segments received plus sent."""
        moved = self._receive() + self._send()
        if moved == 0 and max_wait > 0:
            wait = self._wait_bound(max_wait)
            if wait > 0:
                self.waits += 1
                select.select([self.transport], [], [], wait)
        return moved

    def run_until(self, done: Callable[[], bool], timeout: float, what: str = "transfer") -> None:
        """Step until `done()`; raise EngineError naming `what` after `timeout` s."""
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise EngineError(f"{what} did not finish within {timeout} s")
            self.step(max_wait=0.01)

    def _receive(self) -> int:
        flows, transport = self._flows, self.transport
        if getattr(transport, "runs", False):  # the compiled receiver places MIDDLEs itself
            return self._receive_placing()
        segs = transport.recv_burst(self.rx_batch)
        if not segs:
            return 0
        now = time.monotonic()
        for seg in segs:
            flow = flows.get(seg[1])  # Segment.dest_qp
            if flow is None or seg[12] != flow.peer_addr:  # Segment.src_ip
                self.unknown_qp += 1
                continue
            flow.qp.receive(seg, now)
        return len(segs)

    def _receive_placing(self) -> int:
        """`_receive`, with in-order WRITE/READ RESPONSE MIDDLE payloads placed by the
        compiled receiver and booked per QP before the segments it hands back."""
        targets: dict[int, list[list]] = {}
        for qpn, flow in self._flows.items():
            if (t := flow.qp.burst_targets(flow.peer_addr)) is not None:
                targets[qpn] = t
        segs, placed = self.transport.recv_burst(self.rx_batch, targets)
        now = time.monotonic()
        for qpn, t in targets.items():
            self._flows[qpn].qp.burst_placed(t, now)
        for seg in segs:
            to = self._flows.get(seg[1])  # Segment.dest_qp
            if to is None or seg[12] != to.peer_addr:  # Segment.src_ip
                self.unknown_qp += 1
                continue
            to.qp.receive(seg, now)
        return len(segs) + placed

    def _send(self) -> int:
        now, sent = time.monotonic(), 0
        transport, budget = self.transport, self.budget
        queue, drop, tos, cnp_tos = transport.queue, self._drop, self._tos, self._cnp_tos
        # MIDDLE packets as Runs where the transport builds them (not when each segment
        # must meet the drop hook); budget counts packets either way
        runs = drop is None and getattr(transport, "runs", False)
        for flow in self._flows.values():
            if transport.room() < budget:
                transport.flush()  # what the kernel refused before goes first
                if transport.room() < budget:
                    break  # backpressure: the port is paused or full, QPs keep their packets
            segs = flow.qp.poll(now, budget, runs)
            if not segs:
                continue
            sent += len(segs)  # items: a Run counts once (enough for "something moved")
            if drop is not None:
                kept = [seg for seg in segs if not drop(seg)]
                self.injected_drops += len(segs) - len(kept)
                segs = kept
            queue(flow.handle, segs, tos, cnp_tos)
        self.transport.flush()
        return sent

    def _wait_bound(self, max_wait: float) -> float:
        if self.transport.blocked:  # no readiness event says when a paused qdisc has room
            max_wait = min(max_wait, BLOCKED_RETRY_S)
        now = time.monotonic()
        deadlines = [d for f in self._flows.values() if (d := f.qp.next_deadline()) is not None]
        return min([max_wait] + [d - now for d in deadlines])
