"""The pure-Python send batch: sendmmsg(2) through ctypes.

The reference and fallback for the compiled `_wire.Sender` (wire.py): the
engine uses this one only when the extension is not built or
ROCELAB_ENGINE_PURE=1. Datagrams are built by `fastpath.FrameBuilder`
straight into preallocated slots and handed to the kernel with one
sendmmsg(2) (the socket module has none).
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket

from emulator.roce.fastpath import FrameBuilder, Segment

BATCH = 64  # datagrams per sendmmsg(2)
SLOT_SIZE = 4160  # bytes per send slot: the largest datagram FrameBuilder makes, rounded up
_TRANSIENT = (errno.EAGAIN, errno.ENOBUFS)


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

    def __init__(self, capacity: int = BATCH, slot_size: int = SLOT_SIZE):
        self.capacity, self.count, self._bytes = capacity, 0, 0
        self._buf = (ctypes.c_char * (capacity * slot_size))()
        whole = memoryview(self._buf).cast("B")
        self._slots = [whole[i * slot_size:(i + 1) * slot_size] for i in range(capacity)]
        self._iov = (_Iovec * capacity)()
        self._msgs = (_MMsgHdr * capacity)()
        for i in range(capacity):
            self._iov[i].base = ctypes.addressof(self._buf) + i * slot_size
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

    def drop(self) -> None:
        """Forget every queued datagram (a sender that treats a refusal as a loss)."""
        self.count = self._bytes = 0

    @property
    def room(self) -> int:
        return self.capacity - self.count
