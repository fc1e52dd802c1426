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
"""

from __future__ import annotations

import errno
import random
import socket
from collections.abc import Callable
from dataclasses import dataclass, fields

from emulator.errors import EngineError
from emulator.roce import bpf
from emulator.roce.errors import MalformedPacket
from emulator.roce.fastpath import Segment, parse
from emulator.roce.headers import ROCE_UDP_PORT
from emulator.roce.icrc import IcrcScratch

SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32
_BUFFER = 8 << 20  # socket buffers: a full window of 4 KiB packets, many times over
_TRANSIENT = (errno.EAGAIN, errno.ENOBUFS)


@dataclass
class TransportCounters:
    rx_datagrams: int = 0
    rx_bytes: int = 0
    tx_datagrams: int = 0
    tx_bytes: int = 0
    tx_errors: int = 0  # socket buffer or qdisc full: the datagram is lost
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
                 on_bad_icrc: Callable[[Segment], None] | None = None):
        self.local_ip = local_ip
        self.counters = TransportCounters()
        self.on_bad_icrc = on_bad_icrc
        self._ip_id = random.randrange(1, 0x10000) if ip_id is None else ip_id & 0xFFFF
        self._rx = bytearray(65536)
        self._rxv = memoryview(self._rx)
        self._icrc = IcrcScratch()
        self._raw = self._guard = None
        try:
            self._raw = _open_raw(local_ip)
            self._guard = _open_guard(local_ip)
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
        try:
            self._raw.sendto(datagram, (dst_ip, 0))  # type: ignore[union-attr]
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
        while True:
            try:
                n = self._raw.recv_into(self._rx, 0, socket.MSG_DONTWAIT)  # type: ignore
            except BlockingIOError:
                return None
            self.counters.rx_datagrams += 1
            self.counters.rx_bytes += n
            view = self._rxv[:n]
            try:
                seg = parse(view)
            except MalformedPacket:
                self.counters.malformed += 1
                continue
            if self._icrc.check(view):
                return seg
            self.counters.bad_icrc += 1
            if self.on_bad_icrc is not None:
                self.on_bad_icrc(seg)

    def close(self) -> None:
        for sock in (self._raw, self._guard):
            if sock is not None:
                sock.close()
        self._raw = self._guard = None

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open_raw(local_ip: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
    try:
        bpf.attach(sock, bpf.ROCE_ONLY)
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
        bpf.attach(sock, bpf.DROP_ALL)  # before bind, so nothing is ever queued
        sock.bind((local_ip, ROCE_UDP_PORT))
    except OSError:
        sock.close()
        raise
    return sock
