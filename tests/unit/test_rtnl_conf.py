"""A node's raw rtnetlink requests (rtnl_conf), read back by pyroute2's own decoders."""

from __future__ import annotations

import socket
from typing import Any

from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.ndmsg import ndmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from emulator import rtnl_conf, rtnl_link


def _read(cls: Any, data: bytes) -> Any:
    msg = cls(data)
    msg.decode()
    return msg


def test_addr_request_is_ip_addr_add() -> None:
    msg = _read(ifaddrmsg, rtnl_conf.addr_request(5, "10.1.0.1/31", seq=3))
    assert (msg["index"], msg["prefixlen"], msg["family"]) == (5, 31, socket.AF_INET)
    assert msg.get_attr("IFA_LOCAL") == msg.get_attr("IFA_ADDRESS") == "10.1.0.1"
    assert msg["header"]["flags"] & rtnl_link.NLM_F_CREATE


def test_link_up_request_sets_only_the_up_flag() -> None:
    msg = _read(ifinfmsg, rtnl_conf.link_up_request(9, seq=1))
    assert (msg["index"], msg["flags"], msg["change"]) == (9, rtnl_link.IFF_UP, rtnl_link.IFF_UP)


def test_route_request_one_next_hop_and_a_default() -> None:
    msg = _read(rtmsg, rtnl_conf.route_request("0.0.0.0/0", [("10.2.0.0", 2)], seq=1))
    assert msg["dst_len"] == 0 and msg.get_attr("RTA_DST") is None
    assert (msg.get_attr("RTA_GATEWAY"), msg.get_attr("RTA_OIF")) == ("10.2.0.0", 2)
    assert msg["table"] == 254


def test_route_request_multipath() -> None:
    msg = _read(rtmsg, rtnl_conf.route_request("10.9.0.0/24", [("10.2.0.0", 2), ("10.2.0.2", 3)], 1))
    assert (msg.get_attr("RTA_DST"), msg["dst_len"]) == ("10.9.0.0", 24)
    hops = [(h.get_attr("RTA_GATEWAY"), h["oif"]) for h in msg.get_attr("RTA_MULTIPATH")]
    assert hops == [("10.2.0.0", 2), ("10.2.0.2", 3)]


def test_neigh_request_is_a_permanent_replace() -> None:
    msg = _read(ndmsg, rtnl_conf.neigh_request(socket.AF_INET6, "fe80::52:4cff:fe00:3",
                                               "02:52:4c:00:00:03", 4, seq=1))
    assert (msg["ifindex"], msg["state"], msg["family"]) == (4, 0x80, socket.AF_INET6)
    assert msg.get_attr("NDA_DST") == "fe80::52:4cff:fe00:3"
    assert msg.get_attr("NDA_LLADDR") == "02:52:4c:00:00:03"
    assert msg["header"]["flags"] & rtnl_conf.NLM_F_REPLACE


def test_link_up_request_can_tag_the_link() -> None:
    msg = _read(ifinfmsg, rtnl_conf.link_up_request(1, seq=1, alias="rocelab:lab1"))
    assert msg.get_attr("IFLA_IFALIAS") == "rocelab:lab1"
    assert msg["flags"] & rtnl_link.IFF_UP
