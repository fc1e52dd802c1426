"""Lean rtnetlink dumps for the interface and qdisc collectors.

pyroute2 decodes every attribute of every message into Python objects: on
clos-2x4 with the congestion plane that is ~110 ms per scrape for links,
qdiscs and classes (measured), over half the 200 ms budget before any load.
A scrape needs five numbers per object, so fetch asks the kernel for the
dump over a plain NETLINK_ROUTE socket opened in the node's namespace and
keeps the raw bytes (what the fixtures capture); parse walks only the
attributes it needs with `struct`. tests/unit/test_metrics_netlink.py checks
this decoder against pyroute2's on captured dumps.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .. import netns

NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
IFINFO = struct.Struct("=BxHiII")  # family, type, index, flags, change
TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
NLA = struct.Struct("=HH")
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
RTM_GETLINK, RTM_GETQDISC, RTM_GETTCLASS = 18, 38, 42
IFLA_IFNAME, IFLA_MTU, IFLA_OPERSTATE, IFLA_STATS64 = 3, 4, 16, 23
TCA_KIND, TCA_STATS2 = 1, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE, TCA_STATS_PKT64 = 1, 3, 8
IF_OPER_UP = 6
LINK_ATTRS = frozenset((IFLA_IFNAME, IFLA_MTU, IFLA_OPERSTATE, IFLA_STATS64))
TC_ATTRS = frozenset((TCA_KIND, TCA_STATS2))
STATS64_FIELDS = ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_errors", "tx_errors",
                  "rx_dropped", "tx_dropped")
QUEUE_FIELDS = ("qlen", "backlog", "drops", "requeues", "overlimits")
RECV_BYTES = 1 << 18


class NetlinkError(OSError):
    """The kernel answered a dump with an error."""


@dataclass(frozen=True)
class Link:
    index: int
    name: str
    oper_up: bool
    stats: dict[str, int]
    mtu: int = 0


@dataclass(frozen=True)
class TcObject:
    """A qdisc or a class with its statistics (bytes, packets, qlen, backlog, drops, ...)."""

    index: int
    handle: int
    parent: int
    kind: str
    stats: dict[str, int]


# -- fetch: raw dumps -----------------------------------------------------------


def open_in(ns: str) -> socket.socket:
    """A NETLINK_ROUTE socket living in namespace `ns` (sockets stay where they were made)."""
    with netns.entered(ns):
        return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)


def dump(sock: socket.socket, msg_type: int, body: bytes, seq: int = 1) -> bytes:
    """Send one dump request; return every reply message up to NLMSG_DONE, raw."""
    sock.sendall(NLMSG.pack(NLMSG.size + len(body), msg_type, NLM_F_REQUEST | NLM_F_DUMP, seq, 0)
                 + body)
    chunks = []
    while True:
        data = sock.recv(RECV_BYTES)
        chunks.append(data)
        for mtype, payload in messages(data):
            if mtype == NLMSG_DONE:
                return b"".join(chunks)
            if mtype == NLMSG_ERROR:
                code = -struct.unpack_from("=i", payload)[0]
                if code:
                    raise NetlinkError(code, f"netlink dump {msg_type}: error {code}")


def dump_links(sock: socket.socket) -> bytes:
    return dump(sock, RTM_GETLINK, IFINFO.pack(socket.AF_UNSPEC, 0, 0, 0, 0))


def dump_qdiscs(sock: socket.socket) -> bytes:
    return dump(sock, RTM_GETQDISC, TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0))


def dump_classes(sock: socket.socket, ifindex: int) -> bytes:
    return dump(sock, RTM_GETTCLASS, TCMSG.pack(socket.AF_UNSPEC, ifindex, 0, 0, 0))


# -- parse: pure ----------------------------------------------------------------


def messages(data: bytes) -> Iterator[tuple[int, memoryview]]:
    """(type, payload after the netlink header) for each message in a buffer."""
    view, off = memoryview(data), 0
    while off + NLMSG.size <= len(view):
        length, mtype = NLMSG.unpack_from(view, off)[:2]
        if length < NLMSG.size or off + length > len(view):  # garbage or truncated
            return
        yield mtype, view[off + NLMSG.size:off + length]
        off += (length + 3) & ~3


def attrs(view: memoryview, off: int = 0, wanted: frozenset[int] | None = None
          ) -> dict[int, memoryview]:
    """Attribute type -> payload; with `wanted`, stop as soon as all of those are found."""
    out: dict[int, memoryview] = {}
    end, unpack = len(view), NLA.unpack_from
    while off + 4 <= end:
        length, atype = unpack(view, off)
        if length < 4:
            break
        atype &= 0x3FFF  # drop the NESTED/BYTEORDER bits
        if wanted is None or atype in wanted:
            out[atype] = view[off + 4:off + length]
            if wanted is not None and len(out) == len(wanted):
                break
        off += (length + 3) & ~3
    return out


def parse_links(data: bytes) -> list[Link]:
    out = []
    for mtype, body in messages(data):
        if mtype != 16:  # RTM_NEWLINK
            continue
        _family, _type, index, _flags, _change = IFINFO.unpack_from(body)
        a = attrs(body, IFINFO.size, LINK_ATTRS)
        name = bytes(a.get(IFLA_IFNAME, b"")).rstrip(b"\0").decode()
        oper = a.get(IFLA_OPERSTATE)
        raw = a.get(IFLA_STATS64)
        stats = dict(zip(STATS64_FIELDS, struct.unpack_from("=8Q", raw))) if raw else {}
        mtu = a.get(IFLA_MTU)
        out.append(Link(index, name, bool(oper and oper[0] == IF_OPER_UP), stats,
                        struct.unpack_from("=I", mtu)[0] if mtu else 0))
    return out


def tc_indexes(data: bytes) -> set[int]:
    """The devices a qdisc/class dump speaks of (headers only: cheap)."""
    return {TCMSG.unpack_from(body)[1] for mtype, body in messages(data) if mtype in (36, 40)}


def parse_tc(data: bytes, keep: Callable[[int, int], bool] | None = None) -> list[TcObject]:
    """Qdiscs (RTM_NEWQDISC) or classes (RTM_NEWTCLASS) with their TCA_STATS2 numbers;
    `keep(handle, parent)` skips the others before their attributes are read."""
    out = []
    for mtype, body in messages(data):
        if mtype not in (36, 40):
            continue
        _family, index, handle, parent, _info = TCMSG.unpack_from(body)
        if keep is not None and not keep(handle, parent):
            continue
        a = attrs(body, TCMSG.size, TC_ATTRS)
        kind = bytes(a.get(TCA_KIND, b"")).rstrip(b"\0").decode()
        out.append(TcObject(index, handle, parent, kind, _tc_stats(a.get(TCA_STATS2))))
    return out


def _tc_stats(nested: memoryview | None) -> dict[str, int]:
    stats = {"bytes": 0, "packets": 0, **dict.fromkeys(QUEUE_FIELDS, 0)}
    if nested is None:
        return stats
    a = attrs(nested)
    if TCA_STATS_BASIC in a:
        stats["bytes"], stats["packets"] = struct.unpack_from("=QI", a[TCA_STATS_BASIC])
    if TCA_STATS_PKT64 in a:  # more than 2**32 packets
        stats["packets"] = struct.unpack_from("=Q", a[TCA_STATS_PKT64])[0]
    if TCA_STATS_QUEUE in a:
        stats.update(zip(QUEUE_FIELDS, struct.unpack_from("=5I", a[TCA_STATS_QUEUE])))
    return stats
