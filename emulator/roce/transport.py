"""RoCEv2 datagram I/O for one host network namespace.

Two sockets, created in whatever network namespace the calling thread is in:

- a raw `IPPROTO_UDP` socket with IP_HDRINCL. It sends the complete IPv4
  datagrams `fastpath.FrameBuilder` builds (so TOS/ECN, DF, TTL and the IP
  ident are ours, like rxe's), and receives every UDP datagram for the host,
  narrowed by a classic BPF filter to unfragmented ones for port 4791.
- a UDP socket bound to port 4791 with a drop-all filter. Without a bound
  socket the kernel would answer each RoCE datagram with ICMP port
  unreachable; with the filter it queues nothing. (The kernel counts the
  filtered datagrams in Udp InErrors; that counter is expected to grow.)

Every received datagram is parsed and ICRC-checked here; malformed or
corrupted ones are counted and dropped, never handed to a queue pair.

Sending has two forms: `send` for one ready datagram, and the batch the
endpoint uses on its hot path -- `queue` builds a QP's datagrams straight
into preallocated slots and `flush` hands them all to the kernel with one
sendmmsg(2). Receiving likewise: `recv_burst` takes up to a turn's worth of
datagrams with one recvmmsg(2). Both run in the compiled `_wire` module
(wire.py); without it, `SendBatch` (sendmmsg through ctypes) and one
recv(2) per datagram are the pure-Python reference and fallback.
"""

from __future__ import annotations

import errno
import random
import socket
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import overload

from emulator.errors import EngineError
from emulator.roce import sockfilter, wire
from emulator.roce.errors import MalformedPacket
from emulator.roce.fastpath import FrameBuilder, Segment, parse
from emulator.roce.headers import ROCE_UDP_PORT, Opcode
from emulator.roce.icrc import check_in_place
from emulator.roce.sendbatch import BATCH, SLOT_SIZE, SendBatch

SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32
_BUFFER = 8 << 20  # socket buffers: a full window of 4 KiB packets, many times over
_TRANSIENT = (errno.EAGAIN, errno.ENOBUFS)
_CNP = int(Opcode.CNP)
RX_SLOT = 8192  # bytes per receive slot (compiled path): a longer datagram is malformed here
RX_BURST = 64  # datagrams per recvmmsg(2) at most


@dataclass
class TransportCounters:
    rx_datagrams: int = 0
    rx_bytes: int = 0
    tx_datagrams: int = 0
    tx_bytes: int = 0
    tx_errors: int = 0  # sends the socket or qdisc refused (the datagrams wait and go later)
    bad_icrc: int = 0
    malformed: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Transport:
    """Raw-socket RoCEv2 send/receive bound to one local IPv4 address.

    `on_bad_icrc` is called with each (parsed) segment whose ICRC failed, so
    the owner can attribute the drop to a QP; the segment is then discarded.
    """

    def __init__(self, local_ip: str, *, ip_id: int | None = None,
                 on_bad_icrc: Callable[[Segment], None] | None = None,
                 rail_ips: tuple[str, ...] = ()):
        """`rail_ips`: a multi-NIC host's other addresses. The raw socket is then bound to
        none (each datagram carries its QP's source address, and the host's routes send it
        out of that rail's NIC); a guard holds UDP 4791 on every address."""
        self.local_ip = local_ip
        self.local_ips = (local_ip, *rail_ips)
        self.counters = TransportCounters()
        self.on_bad_icrc = on_bad_icrc
        self._ip_id = random.randrange(1, 0x10000) if ip_id is None else ip_id & 0xFFFF
        self._rx = bytearray(65536)
        self._rxv = memoryview(self._rx)
        self._wire = wire.compiled()
        self._batch = SendBatch()
        self._sender = self._wire.Sender(BATCH, SLOT_SIZE) if self._wire else None
        self._receiver = self._wire.Receiver(RX_BURST, RX_SLOT) if self._wire else None
        ring = [bytearray(RX_SLOT) for _ in range(0 if self._wire else RX_BURST)]
        self._rx_ring = [(rx, memoryview(rx)) for rx in ring]
        self._raw: socket.socket | None = None
        self._guard: socket.socket | None = None
        self._rail_guards: list[socket.socket] = []
        try:
            self._raw = open_raw(local_ip if not rail_ips else "0.0.0.0")
            self._guard = _open_guard(local_ip)
            self._rail_guards = [_open_guard(ip) for ip in rail_ips]
        except OSError as e:
            self.close()
            raise EngineError(f"RoCEv2 sockets on {local_ip}: {e.strerror}") from e

    def fileno(self) -> int:
        assert self._raw is not None
        return self._raw.fileno()

    def next_ip_id(self) -> int:
        """IPv4 ident for the next datagram: one counter per sender, like rxe.

        Zero is skipped because the kernel replaces a zero ident with its own.
        """
        self._ip_id = (self._ip_id + 1) & 0xFFFF or 1
        return self._ip_id

    def send(self, datagram: memoryview | bytes, dst_ip: str) -> bool:
        """Send one complete IPv4 datagram; False (and counted) if the kernel
        had no room for it, which the RC layer recovers from like a loss."""
        if self.blocked:
            self.flush()  # keep the order datagrams were handed over in
        assert self._raw is not None, "transport closed"
        try:
            self._raw.sendto(datagram, (dst_ip, 0))
        except OSError as e:
            if e.errno not in _TRANSIENT:
                raise EngineError(f"sending RoCEv2 to {dst_ip}: {e.strerror}") from e
            self.counters.tx_errors += 1
            return False
        self.counters.tx_datagrams += 1
        self.counters.tx_bytes += len(datagram)
        return True

    def recv(self) -> Segment | None:
        """The next good segment, or None when nothing is queued.

        The payload is a view into a buffer the next call overwrites.
        """
        return self._recv_into(self._rx, self._rxv)

    def _recv_into(self, rx: bytearray, rxv: memoryview) -> Segment | None:
        assert self._raw is not None, "transport closed"
        recv_into, counters = self._raw.recv_into, self.counters
        while True:
            try:
                n = recv_into(rx, 0, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return None
            counters.rx_datagrams += 1
            counters.rx_bytes += n
            try:
                seg = parse(rxv[:n])
            except MalformedPacket:
                counters.malformed += 1
                continue
            if check_in_place(rx, n):  # after parse: it overwrites TOS, TTL, checksums
                return seg
            counters.bad_icrc += 1
            if self.on_bad_icrc is not None:
                self.on_bad_icrc(seg)

    @overload
    def recv_burst(self, limit: int) -> list[Segment]: ...
    @overload
    def recv_burst(self, limit: int, targets: dict[int, list[list]]) -> tuple[list[Segment], int]: ...

    def recv_burst(self, limit: int, targets: dict[int, list[list]] | None = None
                   ) -> list[Segment] | tuple[list[Segment], int]:
        """Up to `limit` good segments queued now (one recvmmsg(2) on the compiled path);
        their payloads are views of a buffer the next call overwrites. With `targets`
        (compiled path only: QueuePair.burst_targets by QPN), in-order MIDDLE payloads
        are placed instead of returned: (segments, datagrams placed)."""
        if self._receiver is None:  # one recv(2) each, into a slot of its own
            out: list[Segment] = []
            for rx, rxv in self._rx_ring[:limit]:
                if (seg := self._recv_into(rx, rxv)) is None:
                    break
                out.append(seg)
            return out if targets is None else (out, 0)
        assert self._raw is not None, "transport closed"
        good, bad, count, nbytes, malformed = self._receiver.recv(self._raw, limit, targets)
        counters = self.counters
        counters.rx_datagrams += count
        counters.rx_bytes += nbytes
        counters.malformed += malformed
        for seg in bad:
            counters.bad_icrc += 1
            if self.on_bad_icrc is not None:
                self.on_bad_icrc(seg)
        if targets is None:
            return good
        return good, count - malformed - len(bad) - len(good)

    # -- the batched send path ----------------------------------------------

    def flow(self, builder: FrameBuilder, dst_ip: str) -> object:
        """A handle on (builder, `dst_ip`) for `queue`, made once per QP;
        `builder.max_datagram` must be at most SLOT_SIZE."""
        if self._wire is None:
            return (builder, self._batch.address(dst_ip))
        src, dst, sport, ttl, pkey = builder.fields()
        return self._wire.Flow(src, dst, sport, ttl, pkey)

    @property
    def runs(self) -> bool:
        """`queue` takes `fastpath.Run`s too (the compiled path: QueuePair.poll(runs=True))."""
        return self._sender is not None

    def queue(self, flow: object, segs: list[Segment], tos: int, cnp_tos: int) -> None:
        """Build `segs` (each with the next IP ident; CNPs with `cnp_tos`) into the
        send batch; they leave on `flush`, or whenever the batch is full."""
        if self._sender is None:
            self._queue_python(flow, segs, tos, cnp_tos)
            return
        done, sub, total, add = 0, 0, len(segs), self._sender.add
        while True:
            done, sub, self._ip_id = add(flow, segs, done, sub, tos, cnp_tos, self._ip_id)
            if self._sender.room:
                return
            self.flush()
            if done < total and not self._sender.room:
                raise EngineError("RoCEv2 send batch full: the kernel refuses every datagram")

    def _queue_python(self, flow: object, segs: list[Segment], tos: int, cnp_tos: int) -> None:
        builder: FrameBuilder
        address: int
        builder, address = flow  # type: ignore[misc]  # what flow() made without _wire
        for seg in segs:
            self._ip_id = ip_id = (self._ip_id + 1) & 0xFFFF or 1  # as next_ip_id()
            if self._batch.add(builder, seg, ip_id, cnp_tos if seg[0] == _CNP else tos, address):
                self.flush()

    def flush(self) -> int:
        """Send every queued datagram; return how many the kernel took.

        What the kernel has no room for stays queued (see `SendBatch.send`)
        and `blocked` is true until a later flush gets it out."""
        batch = self._sender if self._sender is not None else self._batch
        if not batch.count:
            return 0
        assert self._raw is not None, "transport closed"
        try:
            sent, refused, nbytes = batch.send(self._raw.fileno())
        except OSError as e:
            raise EngineError(f"sending RoCEv2 datagrams: {e.strerror}") from e
        self.counters.tx_datagrams += sent
        self.counters.tx_bytes += nbytes
        self.counters.tx_errors += bool(refused)
        return sent

    @property
    def blocked(self) -> bool:
        """Datagrams the kernel refused are waiting: hold new ones back."""
        return (self._sender if self._sender is not None else self._batch).count > 0

    def room(self) -> int:
        """Datagrams `queue` can take before it must flush."""
        return (self._sender if self._sender is not None else self._batch).room

    def close(self) -> None:
        for sock in (self._raw, self._guard, *self._rail_guards):
            if sock is not None:
                sock.close()
        self._raw = self._guard = None
        self._rail_guards = []

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_raw(local_ip: str, program: tuple[sockfilter.Insn, ...] = sockfilter.ROCE_ONLY
             ) -> socket.socket:
    """A raw UDP socket bound to `local_ip` that sees what `program` accepts (RC's
    datagrams, or MRC's: sockfilter.py), with large buffers, non-blocking."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
    try:
        sockfilter.attach(sock, program)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, _BUFFER)
        sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, _BUFFER)
        sock.bind((local_ip, 0))
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _open_guard(local_ip: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sockfilter.attach(sock, sockfilter.DROP_ALL)  # before bind, so nothing is ever queued
        sock.bind((local_ip, ROCE_UDP_PORT))
    except OSError:
        sock.close()
        raise
    return sock
