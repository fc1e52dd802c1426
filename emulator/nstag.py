"""The lab tag on a namespace (lo's ifalias `rocelab:<lab>`), read with one netlink request.

realize writes the tag before a namespace is published; `down` and `list` read it in
every namespace on the machine. pyroute2 took ~7 ms a namespace for it (an IPRoute,
its event loop, every attribute of lo decoded): `down` of a lab on a machine with
1,584 namespaces spent 10.8 of its 12.3 s there. This asks the kernel for link 1 (lo
is always ifindex 1 in a network namespace) and reads two attributes with struct.
The pure part (`request`, `parse`) is unit-tested on bytes pyroute2 wrote.
"""

from __future__ import annotations

import os
import socket
import struct

from . import netns
from .paths import NS_TAG_PREFIX
from .rtnl import NLMSG_HDR
from .rtnl_link import (
    IFINFOMSG,
    IFLA_IFALIAS,
    IFLA_IFNAME,
    NLM_F_REQUEST,
    NLMSG_ERROR,
    RTA_HDR,
    RTM_NEWLINK,
)

RTM_GETLINK = 18
LO_INDEX = 1


def request(index: int = LO_INDEX, seq: int = 1) -> bytes:
    body = IFINFOMSG.pack(socket.AF_UNSPEC, 0, index, 0, 0)
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(body), RTM_GETLINK, NLM_F_REQUEST, seq, 0) + body


def parse(data: bytes) -> dict[int, str]:
    """The string attributes (IFLA_IFNAME, IFLA_IFALIAS) of the one link in a reply."""
    length, kind, _, _, _ = NLMSG_HDR.unpack_from(data, 0)
    if kind == NLMSG_ERROR:
        code = struct.unpack_from("=i", data, NLMSG_HDR.size)[0]
        raise OSError(-code, os.strerror(-code))
    if kind != RTM_NEWLINK or length > len(data):
        raise OSError(f"unexpected netlink reply (type {kind}, {length} bytes)")
    attrs, off = {}, NLMSG_HDR.size + IFINFOMSG.size
    while off + RTA_HDR.size <= length:
        alen, atype = RTA_HDR.unpack_from(data, off)
        if alen < RTA_HDR.size:
            break
        if atype in (IFLA_IFNAME, IFLA_IFALIAS):
            raw = data[off + RTA_HDR.size:off + alen]
            attrs[atype] = raw.split(b"\0", 1)[0].decode(errors="replace")
        off += (alen + 3) & ~3
    return attrs


def lab_of(attrs: dict[int, str]) -> str | None:
    """The lab a link's attributes tag its namespace with (only lo's count)."""
    alias = attrs.get(IFLA_IFALIAS, "")
    if attrs.get(IFLA_IFNAME) != "lo" or not alias.startswith(NS_TAG_PREFIX):
        return None
    return alias[len(NS_TAG_PREFIX):] or None


def read(name: str) -> str | None:
    """The lab namespace `name` belongs to; None if it carries no rocelab tag (or is gone)."""
    try:
        with netns.entered(name), \
                socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
            sock.bind((0, 0))
            sock.sendall(request())
            return lab_of(parse(sock.recv(65536)))
    except OSError:
        return None
