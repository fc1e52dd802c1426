"""Veth pairs made with raw rtnetlink requests, many to a send.

pyroute2 spends ~1.4 ms of Python a veth encoding its request (and runs an asyncio
loop to send it): 1,088 veths of a 132-router fabric took 2.3 s, most of it ours.
Here each request is packed with struct (~20 us), requests go to the kernel in
batches of BATCH, and the kernel's acks are matched by sequence number.
Both ends are created inside their namespaces (IFLA_NET_NS_FD); the first end is
created up. The peer end cannot be: the kernel opens it before the pair is joined
(veth_open: ENOTCONN), so it is brought up later, from inside its namespace. The pure part (`veth_request`,
`acks`) is unit-tested.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .rtnl import NLMSG_HDR, messages

IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
RTA_HDR = struct.Struct("=HH")  # len, type
NLMSG_ERROR = 2
RTM_NEWLINK = 16
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_LINKINFO, IFLA_IFALIAS, IFLA_NET_NS_FD = 1, 3, 4, 18, 20, 28
IFLA_INFO_KIND, IFLA_INFO_DATA, VETH_INFO_PEER = 1, 2, 1
IFF_UP = 0x1
# Requests a send: each ack the kernel queues costs ~1 KiB of our receive buffer (skb
# truesize), and the default buffer (208 KiB) overflows (ENOBUFS) near 200 of them.
BATCH = 64


@dataclass(frozen=True)
class End:
    """One end of a veth: its name, the namespace (an open fd) it is created in."""
    ifname: str
    netns_fd: int
    mtu: int
    mac: str


def attr(kind: int, payload: bytes) -> bytes:
    length = RTA_HDR.size + len(payload)
    return RTA_HDR.pack(length, kind) + payload + b"\0" * (-length & 3)


def _end(end: End) -> bytes:
    return (attr(IFLA_IFNAME, end.ifname.encode() + b"\0")
            + attr(IFLA_MTU, struct.pack("=I", end.mtu))
            + attr(IFLA_ADDRESS, bytes.fromhex(end.mac.replace(":", "")))
            + attr(IFLA_NET_NS_FD, struct.pack("=I", end.netns_fd)))


def veth_request(a: End, b: End, seq: int) -> bytes:
    """RTM_NEWLINK for a veth a <-> b, each end in its own namespace, a up, b down."""
    up = IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, IFF_UP, IFF_UP)
    peer = attr(VETH_INFO_PEER, IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0) + _end(b))
    info = attr(IFLA_LINKINFO, attr(IFLA_INFO_KIND, b"veth\0") + attr(IFLA_INFO_DATA, peer))
    body = up + _end(a) + info
    flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(body), RTM_NEWLINK, flags, seq, 0) + body


def acks(data: bytes) -> Iterator[tuple[int, int]]:
    """(sequence number, errno: 0 for success) of each ack in one received buffer."""
    for off, _, kind, seq in messages(data):
        if kind == NLMSG_ERROR:
            yield seq, -struct.unpack_from("=i", data, off + NLMSG_HDR.size)[0]


Done = Callable[[int, int], None]  # (index of the request in the call, errno or 0)


def _send_batch(sock: socket.socket, batch: list[bytes], done: Done) -> None:
    sock.send(b"".join(batch))
    pending = len(batch)
    while pending:
        for seq, code in acks(sock.recv(1 << 20)):
            done(seq - 1, code)
            pending -= 1


def send_all(messages: list[bytes], done: Done) -> None:
    """Send requests (message i carries sequence number i + 1) from the calling thread's
    namespace, BATCH to a send; `done(i, errno)` once the kernel has answered message i
    (errno 0: done). The kernel handles each request on its own: one that fails does
    not stop the others."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        for start in range(0, len(messages), BATCH):
            _send_batch(sock, messages[start:start + BATCH], done)


def create_veths(pairs: list[tuple[End, End]], done: Done) -> None:
    """Create every pair; `done(i, errno)` once the kernel has answered for pair i."""
    send_all([veth_request(a, b, seq=i + 1) for i, (a, b) in enumerate(pairs)], done)
