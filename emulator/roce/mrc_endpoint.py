"""The MRC connections of one host namespace on their own raw socket.

Beside RC's `Transport` (whose socket filter now leaves MRC's opcodes out),
this endpoint holds a raw IPPROTO_UDP socket whose filter keeps only MRC
datagrams (`sockfilter.MRC_ONLY`). One turn (`step`) receives what is queued
(one recvmmsg(2) on the compiled path), parses and demuxes it by connection id,
lets receivers answer (SACKs at the end of the burst), then lets every sender
put out what its window allows (a message's full-MTU packets as `MrcRun`s, built
in C); the datagrams leave in sendmmsg(2) batches (`_wire.Sender`, or
`SendBatch` on the pure-Python path). A packet on plane k goes from this host's
address k to the peer's address k (NIC k to NIC k).
"""

from __future__ import annotations

import select
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import Protocol

from emulator.errors import EngineError
from emulator.roce import sockfilter, wire
from emulator.roce.errors import MalformedPacket
from emulator.roce.headers import Ecn
from emulator.roce.mrc_wire import MrcPacket, MrcRun, build_into, expand, max_datagram, parse
from emulator.roce.sendbatch import BATCH, SendBatch
from emulator.roce.transport import open_raw

CTRL_DSCP = 48  # SACK, NACK, PROBE, PROBE_REPLY: the high-priority class, as CNPs
RX_BURST = 64
SLOT = 4608  # a send slot: the largest MRC datagram at MTU 4096 (4176 bytes), rounded up
BUDGET = 64  # packets one sender may put out per turn


class Half(Protocol):
    """A sender or a receiver (mrc_sender / mrc_receiver): what the endpoint drives."""

    def receive(self, p: MrcPacket, now: float) -> list[MrcPacket] | None: ...


@dataclass
class MrcCounters:
    rx_datagrams: int = 0
    tx_datagrams: int = 0
    tx_errors: int = 0
    malformed: int = 0
    unknown_conn: int = 0
    turns: int = 0
    waits: int = 0  # turns that blocked in select(): nothing to receive, nothing to send

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class _Conn:
    half: Half
    local: list[bytes]  # per plane
    peer: list[bytes]
    peer_addrs: set[int]
    address: list[int]  # SendBatch destination handles, per plane
    flows: tuple[object, ...] = ()  # compiled path: a _wire.Flow per plane


class _Builder:
    """What SendBatch.add calls: builds one MRC packet into a slot (compiled: `mrc_build`
    of _wire_mrc.h, else mrc_wire.build_into)."""

    def __init__(self, compiled: Callable[..., int] | None = None) -> None:
        self.src = self.dst = b""
        self._compiled = compiled

    def build_into(self, p: MrcPacket, ip_id: int, tos: int, out: memoryview) -> int:
        if self._compiled is not None:
            return self._compiled(out, p, self.src, self.dst, tos, ip_id)
        return build_into(p, self.src, self.dst, tos, ip_id, out)


def compiled_mrc() -> tuple[Callable[..., int], Callable[..., MrcPacket | None]] | None:
    """(mrc_build, mrc_parse) of the compiled data path, configured; None: pure Python."""
    w = wire.compiled()
    if w is None or not hasattr(w, "mrc_build"):
        return None
    w.mrc_configure(MrcPacket)
    return w.mrc_build, w.mrc_parse


class MrcEndpoint:
    def __init__(self, local_ips: tuple[str, ...], dscp: int = 18, ecn: Ecn = Ecn.ECT0,
                 clock: Callable[[], float] | None = None):
        self.counters = MrcCounters()
        self.conns: dict[int, _Conn] = {}
        self._data_tos, self._ctrl_tos = dscp << 2 | ecn, CTRL_DSCP << 2
        self._rx = bytearray(65536)
        self._batch = SendBatch(slot_size=SLOT)
        fast = compiled_mrc()
        self._builder = _Builder(fast[0] if fast else None)
        self._parse = fast[1] if fast else _parse_python
        self._w = wire.compiled() if fast else None  # mrc_add / mrc_recv: batches in C
        if self._w is not None:
            self._tx = self._w.Sender(BATCH, SLOT)
            self._rxr = self._w.Receiver(RX_BURST, SLOT)
        self._ip_id = 1
        self._unflushed: set[int] = set()  # connections that received since their last flush
        try:
            self.sock = open_raw(local_ips[0] if len(local_ips) == 1 else "0.0.0.0",
                                 sockfilter.MRC_ONLY)
        except OSError as e:
            raise EngineError(f"MRC socket on {local_ips[0]}: {e.strerror}") from e

    def fileno(self) -> int:
        return self.sock.fileno()

    def add(self, conn: int, half: Half, local_ips: list[str], peer_ips: list[str]) -> None:
        peer = [socket.inet_aton(ip) for ip in peer_ips]
        local = [socket.inet_aton(ip) for ip in local_ips]
        flows = () if self._w is None else tuple(
            self._w.Flow(local[k % len(local)], a, 0) for k, a in enumerate(peer))
        self.conns[conn] = _Conn(half, local, peer, {int.from_bytes(a, "big") for a in peer},
                                 [self._batch.address(ip) for ip in peer_ips], flows)

    def remove(self, conn: int) -> Half | None:
        c = self.conns.pop(conn, None)
        return None if c is None else c.half

    def step(self, now: float) -> int:
        """One turn: receive a burst, answer it, let senders send. Datagrams moved."""
        self.counters.turns += 1
        moved = self._receive(now)
        for c in self.conns.values():
            poll = getattr(c.half, "poll_burst", None)
            if poll is not None:
                moved += self._send(c, poll(now, BUDGET))
        self._flush()
        return moved

    def wait(self, timeout: float) -> None:
        if timeout > 0:
            self.counters.waits += 1
            select.select([self.sock], [], [], timeout)

    def next_deadline(self) -> float | None:
        times = [d for c in self.conns.values()
                 if (f := getattr(c.half, "next_deadline", None)) and (d := f()) is not None]
        return min(times) if times else None

    def drain(self, now: float) -> int:
        """(idle) Read what reached the MRC socket while no connection runs: stray or
        hostile datagrams are counted (malformed, unknown_conn) and dropped, not left to
        the socket buffer until the next connection."""
        return self._receive(now)

    def _receive(self, now: float) -> int:
        got = self.counters.rx_datagrams
        conns = self.conns
        answered = self._answer(self._read(), now)
        # a receiver's SACK for what is still unacknowledged goes out once its stream
        # pauses (a turn brings it nothing): a message's tail never waits for an ACK
        # timeout, and a stream read in many small bursts is not SACKed once per burst
        quiet = self._unflushed.difference(answered)
        for conn in quiet:
            answered[conn] = []
        for conn, out in answered.items():
            c = conns.get(conn)  # (a quiet one may be gone)
            flush = getattr(c.half, "flush", None) if c is not None else None
            if flush is not None and conn in quiet:
                out += flush(now)
            if c is not None and out:
                self._send(c, out)
        self._unflushed = (self._unflushed | answered.keys()) - quiet
        return self.counters.rx_datagrams - got

    def _answer(self, packets: list[MrcPacket] | Iterator[MrcPacket], now: float
                ) -> dict[int, list[MrcPacket | MrcRun]]:
        """Each packet to its connection's half; their answers, by connection. A burst
        (a list: the compiled path) goes to a receiver a run of its packets at a time."""
        answered: dict[int, list[MrcPacket | MrcRun]] = {}
        if not isinstance(packets, list):  # views of one buffer: one at a time
            for p in packets:
                c = self._conn_of(p)
                if c is not None:
                    answered.setdefault(p.conn, []).extend(c.half.receive(p, now) or ())
            return answered
        i, n = 0, len(packets)
        while i < n:
            p = packets[i]
            c = self._conn_of(p)
            if c is None:
                i += 1
                continue
            out = answered.setdefault(p.conn, [])
            burst = getattr(c.half, "receive_burst", None)
            if burst is None:
                out += c.half.receive(p, now) or ()
                i += 1
            else:
                i, more = burst(packets, i, c.peer_addrs, now)
                out += more
        return answered

    def _conn_of(self, p: MrcPacket) -> _Conn | None:
        """p's connection, if p comes from its peer (else counted, None)."""
        c = self.conns.get(p.conn)
        if c is None or p.src_ip not in c.peer_addrs:
            self.counters.unknown_conn += 1
            return None
        return c

    def _read(self) -> list[MrcPacket] | Iterator[MrcPacket]:
        """The well-formed packets of a burst of at most RX_BURST datagrams (counted): a
        list on the compiled path; on the pure-Python path an iterator of views of one
        buffer each: handle one before the next."""
        counters = self.counters
        if self._w is not None:
            packets, got, malformed = self._w.mrc_recv(self._rxr, self.sock, RX_BURST)
            counters.rx_datagrams += got
            counters.malformed += malformed
            return packets
        return self._read_python()

    def _read_python(self) -> Iterator[MrcPacket]:
        counters = self.counters
        recv_into, rx, parse = self.sock.recv_into, self._rx, self._parse
        view = memoryview(rx)
        for _ in range(RX_BURST):
            try:
                n = recv_into(rx, 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            counters.rx_datagrams += 1
            p = parse(view[:n])
            if p is None:
                counters.malformed += 1
            else:
                yield p

    def _send(self, c: _Conn, items: list[MrcPacket | MrcRun]) -> int:
        """Queue `items` for `c` (flushing whenever the batch fills); packets queued."""
        if self._w is None:
            packets = expand(items)
            for p in packets:
                self._queue(c, p)
            return len(packets)
        add, i, sub = self._w.mrc_add, 0, 0
        while i < len(items):
            i, sub, self._ip_id = add(self._tx, c.flows, items, i, sub, self._data_tos,
                                      self._ctrl_tos, self._ip_id)
            if i < len(items):
                self._flush()
        return len(items) + sum(r.packets - 1 for r in items if type(r) is MrcRun)

    def _queue(self, c: _Conn, p: MrcPacket) -> None:
        plane = p.plane % len(c.peer)
        b = self._builder
        b.src, b.dst = c.local[plane % len(c.local)], c.peer[plane]
        self._ip_id = (self._ip_id + 1) & 0xFFFF or 1
        tos = self._data_tos if p.opcode <= 0xE1 else self._ctrl_tos
        if self._batch.add(b, p, self._ip_id, tos, c.address[plane]):  # type: ignore[arg-type]
            self._flush()

    def _flush(self) -> None:
        batch = self._batch if self._w is None else self._tx
        if not batch.count:
            return
        try:
            sent, refused, _ = batch.send(self.sock.fileno())
        except OSError as e:
            raise EngineError(f"sending MRC datagrams: {e.strerror}") from e
        self.counters.tx_datagrams += sent
        if refused:  # the kernel has no room: these are lost, and MRC recovers them
            self.counters.tx_errors += refused
            if self._w is None:
                self._batch.drop()
            else:
                self._w.mrc_drop(self._tx)

    def close(self) -> None:
        self.sock.close()


def _parse_python(view: memoryview) -> MrcPacket | None:
    try:
        return parse(view, in_place=True)
    except MalformedPacket:
        return None


assert max_datagram(4096) + 4 <= SLOT
