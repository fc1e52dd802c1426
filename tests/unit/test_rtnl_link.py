"""The raw veth request, read back by pyroute2's own decoder, and the ack parser."""

from __future__ import annotations

import errno
import struct

import pytest
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

from emulator import rtnl_link
from emulator.rtnl_link import End

A = End("spine1", 7, 9000, "02:52:4c:00:00:01")
B = End("leaf1", 8, 1500, "02:52:4c:00:00:02")


def _decoded(data: bytes) -> ifinfmsg:
    msg = ifinfmsg(data)
    msg.decode()
    return msg


def test_veth_request_reads_back_as_a_veth_with_both_ends_in_their_namespaces() -> None:
    msg = _decoded(rtnl_link.veth_request(A, B, seq=42))
    assert msg["header"]["type"] == rtnl_link.RTM_NEWLINK
    assert msg["header"]["sequence_number"] == 42
    assert msg["header"]["flags"] & rtnl_link.NLM_F_EXCL  # never adopt an existing device
    assert msg["flags"] & rtnl_link.IFF_UP and msg["change"] & rtnl_link.IFF_UP
    assert (msg.get_attr("IFLA_IFNAME"), msg.get_attr("IFLA_MTU")) == ("spine1", 9000)
    assert msg.get_attr("IFLA_ADDRESS") == "02:52:4c:00:00:01"
    assert msg.get_attr("IFLA_NET_NS_FD") == 7
    info = msg.get_attr("IFLA_LINKINFO")
    assert info.get_attr("IFLA_INFO_KIND") == "veth"
    peer = info.get_attr("IFLA_INFO_DATA").get_attr("VETH_INFO_PEER")
    assert (peer.get_attr("IFLA_IFNAME"), peer.get_attr("IFLA_MTU")) == ("leaf1", 1500)
    assert peer.get_attr("IFLA_ADDRESS") == "02:52:4c:00:00:02"
    assert peer.get_attr("IFLA_NET_NS_FD") == 8
    # The kernel opens the peer before the pair is joined: asking for it up fails (ENOTCONN).
    assert not peer["flags"] & rtnl_link.IFF_UP and not peer["change"]


def test_veth_request_length_is_the_header_length_and_aligned() -> None:
    data = rtnl_link.veth_request(A, B, seq=1)
    assert struct.unpack_from("=I", data)[0] == len(data)
    assert len(data) % 4 == 0


def _ack(seq: int, code: int) -> bytes:
    body = struct.pack("=i", -code) + rtnl_link.NLMSG_HDR.pack(16, rtnl_link.RTM_NEWLINK, 0, seq, 0)
    return rtnl_link.NLMSG_HDR.pack(16 + len(body), rtnl_link.NLMSG_ERROR, 0, seq, 0) + body


def test_acks_give_each_sequence_number_and_its_errno() -> None:
    data = _ack(1, 0) + _ack(2, errno.EEXIST) + _ack(3, 0)
    assert list(rtnl_link.acks(data)) == [(1, 0), (2, errno.EEXIST), (3, 0)]


def test_a_malformed_buffer_is_an_error_not_a_loop() -> None:
    bad = rtnl_link.NLMSG_HDR.pack(0, rtnl_link.NLMSG_ERROR, 0, 1, 0)
    with pytest.raises(OSError, match="malformed"):
        list(rtnl_link.acks(bad))
