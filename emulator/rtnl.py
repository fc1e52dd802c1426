"""A minimal rtnetlink route dump: prefix -> next-hop count, parsed with struct.

pyroute2 decodes every attribute of every route into Python objects (~250 us a
route): reading the FIBs of a 132-router fabric (81,000 routes) took 20 s a
round, and the convergence poll spent its time there. The checks need two
fields a route, so this reads the kernel's dump as bytes and takes only the
destination and the number of next hops (~2 us a route). The pure part
(`parse`) is unit-tested on dumps pyroute2 wrote.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator

NLMSG_HDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst_len, src_len, tos, table, protocol, scope, type, flags
RTA_HDR = struct.Struct("=HH")  # len, type
RTNH_LEN = struct.Struct("=H")  # rtnexthop: len (u16), flags, hops, ifindex
NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWROUTE, RTM_GETROUTE = 24, 26
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
RTA_DST, RTA_MULTIPATH, RTA_TABLE = 1, 9, 15
MAIN_TABLE = 254


def _align(n: int) -> int:
    return (n + 3) & ~3


def messages(data: bytes) -> Iterator[tuple[int, int, int, int]]:
    """(offset, length, type, sequence number) of each netlink message in one received
    buffer; OSError on a message shorter than its header."""
    off = 0
    while off + NLMSG_HDR.size <= len(data):
        length, kind, _, seq, _ = NLMSG_HDR.unpack_from(data, off)
        if length < NLMSG_HDR.size:
            raise OSError("malformed netlink message")
        yield off, length, kind, seq
        off += _align(length)


def request(family: int = socket.AF_INET, seq: int = 1) -> bytes:
    body = RTMSG.pack(family, 0, 0, 0, 0, 0, 0, 0, 0)
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(body), RTM_GETROUTE,
                          NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def parse(data: bytes, widths: dict[str, int], table: int = MAIN_TABLE) -> bool:
    """Add the routes of one received buffer to `widths` (prefix -> next hops); True once
    the dump is done. Routes without a destination (the default) are skipped."""
    for off, length, kind, _ in messages(data):
        if kind == NLMSG_DONE:
            return True
        if kind == NLMSG_ERROR:
            code = struct.unpack_from("=i", data, off + NLMSG_HDR.size)[0]
            if code:
                raise OSError(-code, os.strerror(-code))
        elif kind == RTM_NEWROUTE:
            _route(data, off + NLMSG_HDR.size, off + length, widths, table)
    return False


def _route(data: bytes, start: int, end: int, widths: dict[str, int], table: int) -> None:
    family, dst_len, _, _, rtm_table, _, _, _, _ = RTMSG.unpack_from(data, start)
    off = start + RTMSG.size
    dst = None
    hops = 1
    while off + RTA_HDR.size <= end:
        alen, atype = RTA_HDR.unpack_from(data, off)
        if alen < RTA_HDR.size:
            break
        payload = off + RTA_HDR.size
        if atype == RTA_DST:
            dst = socket.inet_ntop(family, data[payload:off + alen])
        elif atype == RTA_TABLE:
            rtm_table = struct.unpack_from("=I", data, payload)[0]
        elif atype == RTA_MULTIPATH:
            hops, nh = 0, payload
            while nh + RTNH_LEN.size <= off + alen:
                nh_len = RTNH_LEN.unpack_from(data, nh)[0]
                if nh_len < 8:
                    break
                hops += 1
                nh += _align(nh_len)
        off += _align(alen)
    if dst is not None and rtm_table == table:
        widths[f"{dst}/{dst_len}"] = hops


def route_widths(family: int = socket.AF_INET, table: int = MAIN_TABLE) -> dict[str, int]:
    """The calling thread's namespace: routes of `table` -> next-hop count (1 unless
    multipath). The socket is opened here, so it belongs to this thread's namespace."""
    widths: dict[str, int] = {}
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        sock.sendall(request(family))
        while not parse(sock.recv(1 << 20), widths, table):
            pass
    return widths
