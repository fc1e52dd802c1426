"""Bridges of a bridged fabric, through netlink: create them, and read their state.

`fabric: l2` puts one bridge (br0) in every switch namespace, its ports the
switch's veths, with the kernel's 802.1D STP (in a network namespace the
kernel runs STP itself; the user-space helper is only asked in the initial
one). `fabric: evpn` puts one on each leaf, its ports the host-facing veths
and a VXLAN device. Everything here runs in the calling thread's namespace.

The MAC table limit (IFLA_BR_FDB_MAX_LEARNED, kernel 6.7+) is newer than
pyroute2's bridge attribute list, so it is sent in a hand-packed RTM_NEWLINK.
"""

from __future__ import annotations

import errno
import socket
import struct
import subprocess
from dataclasses import dataclass
from typing import Any

from pyroute2 import IPRoute

from . import netns
from .errors import RealizeError
from .plan import BRIDGE as BRIDGE_NAME
from .plan import L2Plan, Node, Plan

USER_HZ = 100  # STP timers cross netlink in clock_t (centiseconds)
VXLAN_PORT = 4789
STP_STATES = {0: "disabled", 1: "listening", 2: "learning", 3: "forwarding", 4: "blocking"}

# include/uapi/linux/{rtnetlink,if_link}.h
RTM_NEWLINK, NLM_F_REQUEST, NLM_F_ACK = 16, 0x1, 0x4
IFLA_LINKINFO, IFLA_INFO_KIND, IFLA_INFO_DATA = 18, 1, 2
IFLA_BR_FDB_N_LEARNED, IFLA_BR_FDB_MAX_LEARNED = 48, 49
NLA_F_NESTED = 0x8000


def _nla(kind: int, payload: bytes) -> bytes:
    body = struct.pack("=HH", 4 + len(payload), kind) + payload
    return body + b"\0" * (-len(body) % 4)


def _request(kind: int, family: int, index: int, attrs: bytes) -> int:
    """One rtnetlink request that changes no interface flags; the kernel's error code (0: ok)."""
    body = struct.pack("=BxHiII", family, 0, index, 0, 0) + attrs  # ifi_flags = ifi_change = 0
    msg = struct.pack("=IHHII", 16 + len(body), kind, NLM_F_REQUEST | NLM_F_ACK, 1, 0) + body
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0) as s:  # NETLINK_ROUTE
        s.send(msg)
        reply = s.recv(4096)
    return -int(struct.unpack_from("=i", reply, 16)[0])


def set_mac_limit(index: int, limit: int) -> None:
    """The bridge learns at most `limit` MACs (0: unlimited); unknown destinations flood."""
    data = _nla(IFLA_BR_FDB_MAX_LEARNED, struct.pack("=I", limit))
    info = _nla(IFLA_INFO_KIND, b"bridge\0") + _nla(IFLA_INFO_DATA | NLA_F_NESTED, data)
    code = _request(RTM_NEWLINK, socket.AF_UNSPEC, index, _nla(IFLA_LINKINFO | NLA_F_NESTED, info))
    if code:
        raise RealizeError(f"cannot set the MAC table limit to {limit}: {errno.errorcode.get(code)} "
                           "(the kernel needs IFLA_BR_FDB_MAX_LEARNED, Linux 6.7+)")


def create(ipr: IPRoute, plan: Plan, node: Node) -> None:
    """br0 with STP as planned, its ports (and, on an EVPN leaf, the VXLAN device) enslaved."""
    l2 = plan.l2
    assert l2 is not None and node.bridge is not None
    stp = plan.fabric.value == "l2" and l2.stp
    ipr.link("add", ifname=node.bridge, kind="bridge", address=node.bridge_mac,
             br_stp_state=int(stp), br_priority=node.stp_priority or 32768,
             br_forward_delay=l2.forward_delay_s * USER_HZ, br_hello_time=l2.hello_time_s * USER_HZ,
             br_max_age=l2.max_age_s * USER_HZ, br_ageing_time=l2.ageing_time_s * USER_HZ,
             br_mcast_snooping=0)
    br = socket.if_nametoindex(node.bridge)
    if l2.mac_table_limit:
        set_mac_limit(br, l2.mac_table_limit)
    ports = [p.name for p in node.interfaces if p.bridged]
    for name in ports:
        ipr.link("set", index=socket.if_nametoindex(name), master=br)
    if plan.fabric.value == "evpn":
        # tos 1 = inherit: the outer header carries the RoCE DSCP and ECN (CE comes back
        # to the inner header on decap, RFC 6040); without mtu= it would be 1500.
        ipr.link("add", ifname=l2.vxlan, kind="vxlan", vxlan_id=l2.vni, vxlan_local=node.loopback,
                 vxlan_port=VXLAN_PORT, vxlan_learning=0, vxlan_tos=1, vxlan_ttl=64,
                 mtu=node.interfaces[-1].mtu)
        vx = socket.if_nametoindex(l2.vxlan)
        ipr.link("set", index=vx, master=br)
        ipr.brport("set", index=vx, learning=0)  # remote MACs come from EVPN (zebra), not floods
        ipr.link("set", index=vx, state="up")  # after brport set, which clears the port's flags
        # No IPv6 on br0 (FRR's SVI) or the VXLAN device: their link-local neighbours would
        # add MAC+IP type-2 routes that come and go; one type-2 per host MAC is the model.
        for dev in (node.bridge, l2.vxlan):
            with open(f"/proc/sys/net/ipv6/conf/{dev}/disable_ipv6", "w") as f:
                f.write("1")
    ipr.link("set", index=br, state="up")


@dataclass
class PortState:
    port: str
    state: str  # listening, learning, forwarding, blocking, disabled
    role: str  # root, designated, alternate (blocked by STP), disabled


def _attr(msg: Any, *path: str) -> Any:
    for name in path:
        if msg is None:
            return None
        msg = msg.get_attr(name)
    return msg


def bridge_state(node: Node, l2: L2Plan) -> dict[str, Any]:
    """STP root, this bridge's id, each port's state and role, and its MAC table (in the
    calling thread's namespace, which must be the node's)."""
    with IPRoute() as ipr:
        links = {m["index"]: m for m in ipr.get_links()}
        br_index = next((i for i, m in links.items() if m.get_attr("IFLA_IFNAME") == node.bridge), None)
        if br_index is None:
            raise RealizeError(f"{node.name}: no bridge {node.bridge}")
        br = _attr(links[br_index], "IFLA_LINKINFO", "IFLA_INFO_DATA")
        root_id, own_id = br.get_attr("IFLA_BR_ROOT_ID"), br.get_attr("IFLA_BR_BRIDGE_ID")
        root_port = br.get_attr("IFLA_BR_ROOT_PORT")
        ports = []
        for m in links.values():
            if m.get_attr("IFLA_MASTER") != br_index:
                continue
            data = _attr(m, "IFLA_LINKINFO", "IFLA_INFO_SLAVE_DATA")
            state = STP_STATES.get(data.get_attr("IFLA_BRPORT_STATE"), "?") if data else "?"
            port_no = data.get_attr("IFLA_BRPORT_NO") if data else None
            if state == "disabled":
                role = "disabled"
            elif root_port and port_no == root_port:
                role = "root"
            elif state == "blocking":
                role = "alternate"  # 802.1D: a blocked port is the alternate (or backup) path
            else:
                role = "designated"
            ports.append(PortState(m.get_attr("IFLA_IFNAME"), state, role))
        on_bridge = {i for i, m in links.items() if m.get_attr("IFLA_MASTER") == br_index}
        fdb = [n for n in ipr.get_neighbours(family=socket.AF_BRIDGE)
               if n.get_attr("NDA_MASTER") == br_index or n["ifindex"] in on_bridge]
    learned = [n for n in fdb if not n["state"] & 0x80]  # NUD_PERMANENT: the ports' own MACs
    names = {i: links[i].get_attr("IFLA_IFNAME") for i in on_bridge}
    return {"root": _bridge_id(root_id), "bridge_id": _bridge_id(own_id),
            "is_root": root_id == own_id, "ports": ports,
            "macs_learned": len(learned), "mac_table_limit": l2.mac_table_limit,
            "fdb": {n.get_attr("NDA_LLADDR"): names[n["ifindex"]] for n in learned
                    if n["ifindex"] in names}}  # learned MAC -> the port it was seen on


def _bridge_id(v: Any) -> str:
    if isinstance(v, dict):  # pyroute2 unpacks the (big-endian) priority in host order
        prio = int(v.get("prio", 0))
        return f"{((prio & 0xFF) << 8) | (prio >> 8):04x}.{v.get('addr', '?')}"
    return str(v)


def _each_bridge(plan: Plan, fn: Any) -> None:
    """Run fn(ipr, bridge index) in every bridging switch of the lab, in parallel."""
    def one(node: Node) -> None:
        with netns.entered(node.netns), IPRoute() as ipr:
            fn(ipr, socket.if_nametoindex(node.bridge or BRIDGE_NAME))

    netns.parallel(one, [n for n in plan.routers if n.bridge])


def set_stp(plan: Plan, enabled: bool) -> None:
    """STP on or off on every bridge, with every port restarted (the bridge bounced).

    Off on a fabric with redundant links is a loop: every port comes back designated and,
    without STP, forwarding at once (the kernel keeps a port it blocked blocked otherwise).
    On again: every port comes back listening -- nothing is forwarded, so a storm stops
    at once -- and the tree is rebuilt after 2 x forward delay.
    """
    def one(ipr: IPRoute, br: int) -> None:
        ipr.link("set", index=br, kind="bridge", br_stp_state=int(enabled))
        ipr.link("set", index=br, state="down")
        ipr.link("set", index=br, state="up")

    _each_bridge(plan, one)


def forget_macs(node: Node, entries: list[tuple[str, str]]) -> None:
    """Delete learned (mac, port) entries from a switch's bridge; one already gone (aged
    out meanwhile) is fine."""
    with netns.entered(node.netns):
        for mac, port in entries:
            res = subprocess.run(["bridge", "fdb", "del", mac, "dev", port, "master"],
                                 capture_output=True, text=True, timeout=10)
            if res.returncode and "No such file or directory" not in res.stderr:
                raise RealizeError(f"{node.name}: cannot forget MAC {mac} on {port}: "
                                   f"{res.stderr.strip()}")


def flush_macs(plan: Plan) -> None:
    """Forget every learned MAC on every bridge (what a topology change does)."""
    _each_bridge(plan, lambda ipr, br: ipr.link("set", index=br, kind="bridge",
                                                br_fdb_flush=True))
