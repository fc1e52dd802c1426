"""Switch and host port queues: HTB at the emulated line rate, one class per TC.

    1:  htb (default 1:10)
    └─ 1:1  rate R
       ├─ 1:16 TC 6 (CNP, routing control)  prio 0  -> bfifo       served first
       ├─ 1:13 TC 3 (RoCE, lossless)       prio 1  -> tbf 13:     the pause switch
       ├─ 1:12 TC 2 (MRC data, lossy)      prio 2  -> bfifo       trimmable (BPF), tail drop
       └─ 1:10 TC 0 (everything else)      prio 2  -> bfifo       lossy, tail drop
    clsact: the fabric BPF program on ingress and egress (classifies: skb->priority),
            each filter's classid the port's lab-wide id (how the program knows its port)

Pausing TC 3 sets its TBF to a crawl; resuming sets it back to R and sends
one "kick" frame through it, because TBF only restarts on an enqueue (an
HTB class rate change does not work as a pause switch: it stays stuck).
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
from dataclasses import replace

from pyroute2 import IPRoute
from pyroute2.netlink.rtnl.tcmsg import plugins as _tc_plugins

from ..errors import RocelabError
from ..plan.congestion import CNP_TC, DEFAULT_TC, MRC_TC, ROCE_TC, CongestionPlan

# pyroute2 knows pfifo but not bfifo; both take the same struct tc_fifo_qopt
# (the limit is in bytes for bfifo), so the pfifo encoder serves for both.
_tc_plugins.setdefault("bfifo", _tc_plugins["pfifo"])

TC_PRIO = {CNP_TC: 0, ROCE_TC: 1, DEFAULT_TC: 2, MRC_TC: 2}
BFIFO_TCS = (DEFAULT_TC, MRC_TC, CNP_TC)  # the classes with a byte FIFO (lossless: TBF)
PAUSED_BPS = 8000  # TBF needs a non-zero rate; 8 kbit/s is a stop at these speeds
EGRESS, INGRESS = "ffff:fff3", "ffff:fff2"
PORT_CLASS = 0x10001  # 1:1, the port's line rate
TCA_STAB_BASE, LINKLAYER_ETHERNET = 1, 1


def burst_bytes(rate_bps: int, mtu: int) -> int:
    """At least 0.5 ms of data (HTB/TBF accuracy) and two full frames."""
    return max(int(rate_bps * 0.0005 / 8), 2 * (mtu + 64))


def of_port(cp: CongestionPlan, speed_bps: int) -> CongestionPlan:
    """The congestion plan as one port sees it: shaped at its own speed / D."""
    return replace(cp, rate_bps=cp.rate_of(speed_bps))


def classid(tc: int) -> int:
    return 0x10000 | (0x10 + tc)


def apply_port(ipr: IPRoute, ifname: str, cp: CongestionPlan, mtu: int,
               egress_fd: int, ingress_fd: int, port_id: int) -> None:
    """Shape one port and attach the fabric program to it as port `port_id`.

    The program reads its port from skb->tc_classid, which cls_bpf sets to the
    filter's classid (its 16-bit minor) before every run: the id travels with
    the attachment, not with frames, so it holds on bridged ports too."""
    idx = socket.if_nametoindex(ifname)
    rate, burst = f"{cp.rate_bps}bit", burst_bytes(cp.rate_bps, mtu)
    ipr.tc("add", "htb", idx, 0x10000, default=0x10)
    if cp.trim:
        size_from_skb(idx)
    ipr.tc("add-class", "htb", idx, PORT_CLASS, parent=0x10000, rate=rate, ceil=rate,
           burst=burst, cburst=burst, mtu=mtu + 64)
    floor = f"{max(8000, cp.rate_bps // 1000)}bit"  # tiny assured rate: prio decides
    for tc, prio in TC_PRIO.items():
        ipr.tc("add-class", "htb", idx, classid(tc), parent=PORT_CLASS, rate=floor, ceil=rate,
               burst=burst, cburst=burst, prio=prio, mtu=mtu + 64)
    for tc in BFIFO_TCS:
        ipr.tc("add", "bfifo", idx, (0x10 + tc) << 16, parent=classid(tc), limit=cp.buffer_bytes)
    set_pause(ipr, idx, cp, mtu, paused=False, create=True)
    ipr.tc("add", "clsact", idx)
    for parent, fd, name in ((EGRESS, egress_fd, "fabric_egress"),
                             (INGRESS, ingress_fd, "fabric_ingress")):
        ipr.tc("add-filter", "bpf", idx, ":1", fd=fd, name=name, parent=parent,
               classid=port_id, direct_action=True)


def size_from_skb(idx: int) -> None:
    """Give the port's root HTB a size table (overhead 0, Ethernet): the qdiscs then charge
    a packet its length as it reaches them, not as it entered the device. The kernel takes
    a packet's length for the qdiscs before the egress BPF program runs, so without this a
    frame the program trimmed to 128 bytes would still cost the priority class, and its
    FIFO's limit, its full size (measured: 80 % of a 2:1 incast trimmed instead of ~55 %,
    the trimmed headers holding the link as if whole)."""
    from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST
    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    spec = struct.pack("=BBhiIIII", 0, 0, 0, 0, LINKLAYER_ETHERNET, 0, 0, 0)  # tc_sizespec
    msg = tcmsg()
    msg["header"]["type"] = 36  # RTM_NEWQDISC without NLM_F_CREATE: change the root
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK
    msg["index"], msg["handle"], msg["parent"] = idx, 0x10000, 0xFFFFFFFF  # root, 1:
    msg["attrs"] = [("TCA_KIND", "htb"),
                    ("TCA_STAB", struct.pack("=HH", 4 + len(spec), TCA_STAB_BASE) + spec)]
    msg.encode()
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0) as nl:  # this namespace's
        nl.send(bytes(msg.data))
        ack = nl.recv(4096)
    err = -struct.unpack_from("=i", ack, 16)[0]  # nlmsgerr.error after the nlmsghdr
    if err:
        raise RocelabError(f"cannot give port {idx}'s qdisc a size table: {os.strerror(err)}")


def set_port_rate(ipr: IPRoute, idx: int, cp: CongestionPlan, mtu: int, rate_bps: int) -> None:
    """Cap one port's whole tree (class 1:1, which every TC borrows from) at `rate_bps`: a
    gray fault's degraded optic; `cp.rate_bps` (the port's own, `of_port`) restores it.
    The lossless TBF keeps its rate: its parent caps it, and pauses still work."""
    rate, burst = f"{rate_bps}bit", burst_bytes(cp.rate_bps, mtu)
    ipr.tc("change-class", "htb", idx, PORT_CLASS, parent=0x10000, rate=rate, ceil=rate,
           burst=burst, cburst=burst, mtu=mtu + 64)


def port_rate(ipr: IPRoute, idx: int) -> int | None:
    """Class 1:1's rate in bit/s (None: the port is not shaped)."""
    return htb_class_rate(ipr, idx, PORT_CLASS)


def htb_class_rate(ipr: IPRoute, idx: int, handle: int) -> int | None:
    """An HTB class's rate in bit/s (None: no such HTB class on the port)."""
    for c in ipr.get_classes(index=idx):
        if c["handle"] == handle and c.get_attr("TCA_KIND") == "htb":
            opts = c.get_attr("TCA_OPTIONS")
            return int(opts.get_attr("TCA_HTB_RATE64") or opts.get_attr("TCA_HTB_PARMS")["rate"]) * 8
    return None


def keep_order(netns_name: str, ifnames: list[str]) -> None:
    """Receive each flow on one CPU (RPS) on these ports, in their namespace.

    veth puts a frame on the backlog of the CPU that dequeued it from the
    sender's qdisc. A shaped or paused qdisc is dequeued from timers and
    softirqs on any CPU, so two packets of one QP can be received out of
    order, and RoCE answers reordering with a NAK and go-back-N (measured:
    hundreds of spurious retransmissions per flow under pauses, 0 drops).
    RPS picks the CPU by flow hash instead. sysfs shows a namespace's ports
    only to a mount of its own, which `ip netns exec` makes.
    """
    mask = format((1 << min(os.cpu_count() or 1, 32)) - 1, "x")
    paths = [f"/sys/class/net/{i}/queues/rx-0/rps_cpus" for i in ifnames]
    done = subprocess.run(["ip", "netns", "exec", netns_name, "tee", *paths], input=mask + "\n",
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise RocelabError(f"cannot steer receive on {netns_name}: {done.stderr.strip()}")


def set_pause(ipr: IPRoute, idx: int, cp: CongestionPlan, mtu: int, paused: bool,
              create: bool = False) -> None:
    """Stop or restart the lossless class of one port (its TBF leaf)."""
    rate = PAUSED_BPS if paused else cp.rate_bps
    ipr.tc("add" if create else "change", "tbf", idx, (0x10 + ROCE_TC) << 16,
           parent=classid(ROCE_TC), rate=f"{rate}bit", burst=burst_bytes(cp.rate_bps, mtu),
           limit=cp.lossless_buffer_bytes)


def pfc_frame(src_mac: str, tc: int, quanta: int) -> bytes:
    """An 802.1Qbb priority flow control frame: pause (quanta > 0) or resume (0) one class."""
    dst = bytes.fromhex("0180c2000001")
    times = [0] * 8
    times[tc] = quanta
    body = struct.pack("!HH8H", 0x0101, 1 << tc, *times)
    frame = dst + bytes.fromhex(src_mac.replace(":", "")) + struct.pack("!H", 0x8808) + body
    return frame.ljust(60, b"\0")


def kick_frame(src_mac: str, dst_mac: str, dscp: int) -> bytes:
    """A minimal IPv4/UDP frame in the RoCE DSCP that restarts a paused TBF.

    Addressed to 127.0.0.1, which the receiving router drops as a martian."""
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, dscp << 2, 28, 0, 0x4000, 1, 17, 0,
                     socket.inet_aton("192.0.2.1"), socket.inet_aton("127.0.0.1"))
    udp = struct.pack("!HHHH", 9, 9, 8, 0)
    return (bytes.fromhex(dst_mac.replace(":", "")) + bytes.fromhex(src_mac.replace(":", ""))
            + b"\x08\x00" + ip + udp).ljust(60, b"\0")


def queue_drops(plan, tc: int) -> dict[str, int]:
    """Drops of one class's leaf qdisc on every port: {"node:port": drops}."""
    from .. import netns

    handle = (0x10 + tc) << 16
    out = {}
    for node in plan.nodes:
        with netns.entered(node.netns), IPRoute() as ipr:
            for q in ipr.get_qdiscs():
                if q["handle"] == handle:
                    stats = q.get_attr("TCA_STATS2")
                    basic = stats.get_attr("TCA_STATS_QUEUE") if stats else None
                    name = socket.if_indextoname(q["index"])
                    out[f"{node.name}:{name}"] = (basic or {}).get("drops", 0)
    return out


def pause_messages(index: int, cp: CongestionPlan, mtu: int) -> tuple[bytes, bytes]:
    """Prebuilt RTM_NEWQDISC messages (pause, resume) for one port's lossless TBF.

    The controller sends these bytes on a netlink socket opened in the port's
    namespace: ~20 us per reaction instead of ~1 ms through IPRoute.tc."""
    from pyroute2.netlink import NLM_F_REQUEST
    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    out = []
    for rate in (PAUSED_BPS, cp.rate_bps):
        msg = tcmsg()
        msg["header"]["type"] = 36  # RTM_NEWQDISC, as `tc qdisc change`
        msg["header"]["flags"] = NLM_F_REQUEST
        msg["index"], msg["handle"] = index, (0x10 + ROCE_TC) << 16
        msg["parent"] = classid(ROCE_TC)
        msg["attrs"] = [("TCA_KIND", "tbf"), ("TCA_OPTIONS", _tc_plugins["tbf"].get_parameters(
            {"rate": f"{rate}bit", "burst": burst_bytes(cp.rate_bps, mtu),
             "limit": cp.lossless_buffer_bytes}))]
        msg.encode()
        out.append(bytes(msg.data))
    return out[0], out[1]
