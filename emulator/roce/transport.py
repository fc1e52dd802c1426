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
endpoint uses on its hot path -- `queue` builds each datagram straight into
a preallocated slot and `flush` hands them all to the kernel with one
sendmmsg(2) (through ctypes: the socket module has no sendmmsg). That saves
the per-datagram system call and socket-call overhead, a quarter of the
cost of sending on a veth.
"""

from __future__ import annotations

import ctypes
import errno
import os
import random
import socket
from collections.abc import Callable
from dataclasses import dataclass, fields

from emulator.errors import EngineError
from emulator.roce import sockfilter
from emulator.roce.errors import MalformedPacket
from emulator.roce.fastpath import FrameBuilder, Segment, parse
from emulator.roce.headers import ROCE_UDP_PORT
from emulator.roce.icrc import check_in_place

SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32
_BUFFER = 8 << 20  # socket buffers: a full window of 4 KiB packets, many times over
_TRANSIENT = (errno.EAGAIN, errno.ENOBUFS)
BATCH = 64  # datagrams per sendmmsg(2)
SLOT_SIZE = 4160  # bytes per send slot: the largest datagram FrameBuilder makes, rounded up


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _MsgHdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.POINTER(_Iovec)), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


class _MMsgHdr(ctypes.Structure):
    _fields_ = [("hdr", _MsgHdr), ("len", ctypes.c_uint)]


class _SockaddrIn(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("port", ctypes.c_uint16),
                ("addr", ctypes.c_uint8 * 4), ("zero", ctypes.c_uint8 * 8)]


_sendmmsg = ctypes.CDLL(None, use_errno=True).sendmmsg  # Linux, glibc >= 2.14 or musl
_sendmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
_sendmmsg.restype = ctypes.c_int


class SendBatch:
    """Up to `capacity` datagrams for one sendmmsg(2), built in place.

    Each slot of one preallocated buffer has its iovec and message header
    set up once; adding a datagram only builds it into the slot and sets
    two numbers (its length and its destination's sockaddr), through flat
    memoryviews of the ctypes arrays.
    """

    def __init__(self, capacity: int = BATCH):
        self.capacity, self.count, self._bytes = capacity, 0, 0
        self._buf = (ctypes.c_char * (capacity * SLOT_SIZE))()
        whole = memoryview(self._buf).cast("B")
        self._slots = [whole[i * SLOT_SIZE:(i + 1) * SLOT_SIZE] for i in range(capacity)]
        self._iov = (_Iovec * capacity)()
        self._msgs = (_MMsgHdr * capacity)()
        for i in range(capacity):
            self._iov[i].base = ctypes.addressof(self._buf) + i * SLOT_SIZE
            self._msgs[i].hdr.iov = ctypes.pointer(self._iov[i])
            self._msgs[i].hdr.iovlen = 1
            self._msgs[i].hdr.namelen = ctypes.sizeof(_SockaddrIn)
        # Strided views of the two fields set per datagram, indexed by slot:
        # iov_len (the second word of each iovec) and msg_name (the first of each header).
        # (typeshed's memoryview.cast lists no "N", size_t's format)
        self._iov_len = memoryview(self._iov).cast("B").cast("N")[  # type: ignore[call-overload]
            _Iovec.len.offset // ctypes.sizeof(ctypes.c_size_t)::
            ctypes.sizeof(_Iovec) // ctypes.sizeof(ctypes.c_size_t)]
        self._msg_name = memoryview(self._msgs).cast("B").cast("P")[
            ::ctypes.sizeof(_MMsgHdr) // ctypes.sizeof(ctypes.c_void_p)]
        self._addresses: dict[tuple[str, int], _SockaddrIn] = {}

    def address(self, ip: str, port: int = 0) -> int:
        """A destination handle for `add`: its sockaddr_in, kept alive here."""
        sa = self._addresses.get((ip, port))
        if sa is None:
            sa = _SockaddrIn(socket.AF_INET, socket.htons(port),
                             (ctypes.c_uint8 * 4)(*socket.inet_aton(ip)))
            self._addresses[(ip, port)] = sa
        return ctypes.addressof(sa)

    def add(self, builder: FrameBuilder, seg: Segment, ip_id: int, tos: int,
            address: int) -> bool:
        """Build `seg` into the next slot, for `address`; True if now full."""
        i = self.count
        self._iov_len[i] = n = builder.build_into(seg, ip_id, tos, self._slots[i])
        self._msg_name[i] = address
        self.count = i = i + 1
        self._bytes += n
        return i == self.capacity

    def datagram(self, i: int) -> memoryview:
        """The i-th queued datagram (for tests and tools)."""
        return self._slots[i][:self._iov_len[i]]

    def send(self, fd: int) -> tuple[int, int, int]:
        """Send the batch: (datagrams sent, refused, bytes sent).

        When the kernel refuses a datagram with EAGAIN/ENOBUFS (socket
        buffer or qdisc full: the port is paused or busy), it and the ones
        after it stay in the batch, in order, for the next call -- a NIC
        whose port is paused holds its packets, it does not drop them. Any
        other error raises OSError."""
        count = self.count
        sent = 0
        base, size = ctypes.addressof(self._msgs), ctypes.sizeof(_MMsgHdr)
        while sent < count:
            k = _sendmmsg(fd, base + sent * size, count - sent, 0)
            if k > 0:
                sent += k
                continue
            err = ctypes.get_errno()
            if err not in _TRANSIENT:
                self.count = self._bytes = 0
                raise OSError(err, os.strerror(err))
            break
        queued = self._bytes
        self._keep_from(sent)
        return sent, count - sent, queued - self._bytes

    def _keep_from(self, first: int) -> None:
        """Drop the datagrams before `first`; move the rest to the front."""
        left = self.count - first
        for j in range(left):
            i = first + j
            n = self._iov_len[i]
            self._slots[j][:n] = self._slots[i][:n]
            self._iov_len[j], self._msg_name[j] = n, self._msg_name[i]
        self.count = left
        self._bytes = sum(self._iov_len[j] for j in range(left))

    @property
    def room(self) -> int:
        return self.capacity - self.count


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
        self._batch = SendBatch()
        self._raw: socket.socket | None = None
        self._guard: socket.socket | None = None
        self._rail_guards: list[socket.socket] = []
        try:
            self._raw = _open_raw(local_ip if not rail_ips else "0.0.0.0")
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
        if self._batch.count:
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
        assert self._raw is not None, "transport closed"
        recv_into, rx, rxv, counters = self._raw.recv_into, self._rx, self._rxv, self.counters
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

    # -- the batched send path ----------------------------------------------

    def address(self, dst_ip: str) -> int:
        """A handle on `dst_ip` for `queue` (made once per peer)."""
        return self._batch.address(dst_ip)

    def queue(self, builder: FrameBuilder, seg: Segment, tos: int, address: int) -> None:
        """Build `seg` (with the next IP ident) into the send batch; it leaves
        on `flush`, or at once when the batch is full. `address` is from
        `address()`; `builder.max_datagram` must be at most SLOT_SIZE."""
        self._ip_id = ip_id = (self._ip_id + 1) & 0xFFFF or 1  # as next_ip_id()
        if self._batch.add(builder, seg, ip_id, tos, address):
            self.flush()

    def flush(self) -> int:
        """Send every queued datagram; return how many the kernel took.

        What the kernel has no room for stays queued (see `SendBatch.send`)
        and `blocked` is true until a later flush gets it out."""
        if not self._batch.count:
            return 0
        assert self._raw is not None, "transport closed"
        try:
            sent, refused, nbytes = self._batch.send(self._raw.fileno())
        except OSError as e:
            raise EngineError(f"sending RoCEv2 datagrams: {e.strerror}") from e
        self.counters.tx_datagrams += sent
        self.counters.tx_bytes += nbytes
        self.counters.tx_errors += bool(refused)
        return sent

    @property
    def blocked(self) -> bool:
        """Datagrams the kernel refused are waiting: hold new ones back."""
        return self._batch.count > 0

    def room(self) -> int:
        """Datagrams `queue` can take before it must flush."""
        return self._batch.room

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


def _open_raw(local_ip: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
    try:
        sockfilter.attach(sock, sockfilter.ROCE_ONLY)
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
