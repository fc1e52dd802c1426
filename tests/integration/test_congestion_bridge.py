"""Bridged ports: the congestion plane charges the port a frame really leaves or enters.

On a bridge, frames keep the hosts' MACs end to end, so a port cannot be told
from the frame: the fabric program knows its port from its filter's classid
(the controller attaches each port's filters with the port's id). Built by
hand here, independent of how a topology spells a bridged fabric: three
hosts (a, b, c) on one switch namespace whose Linux bridge holds the three
veths, a Plan describing them, and the lab's own Controller attaching the
programs and reacting to XOFF/XON from the ring buffer.

Ports (lab-wide ids, as the plan numbers them): sw:a 1, sw:b 2, sw:c 3,
a:eth0 4, b:eth0 5, c:eth0 6. Every MAC is the plan's (02:52:4c:00:00:ID), as
realize sets them: the frames below carry host MACs through the switch, which
is what the old MAC-based identity got wrong (it charged sw:b's egress of a
frame from a to a:eth0, and the switch's ingress of a frame for b to b:eth0).
"""

from __future__ import annotations

import os
import shutil
import socket
import struct

import pytest
from pyroute2 import IPRoute

from emulator import netns
from emulator.congestion.controller import Controller
from emulator.congestion.maps import StatsReader
from emulator.paths import NS_TAG_PREFIX, lab_run_dir
from emulator.plan import Interface, Kind, Link, Node, Plan
from emulator.plan.congestion import CongestionPlan
from emulator.spec import Addressing

from .conftest import PREFIX, poll

LAB = f"{PREFIX}cbr"
HOSTS = ("a", "b", "c")
TCS = (0, 3, 6)
ROCE, CNP = 26, 48
XOFF, XON = 20_000, 10_000


def _plan() -> Plan:
    sw_ports = tuple(Interface(h, h, "eth0", None, False, port_id=i)
                     for i, h in enumerate(HOSTS, 1))
    sw = Node("sw", Kind.LEAF, f"{LAB}-sw", sw_ports)
    hosts = [Node(h, Kind.HOST, f"{LAB}-{h}", (Interface("eth0", "sw", h, None, False,
                                                         port_id=len(HOSTS) + i),), leaf="sw")
             for i, h in enumerate(HOSTS, 1)]
    cp = CongestionPlan(
        dilation=40000.0, speed_bps=400 * 10**9, rate_bps=10 * 10**6, buffer_bytes=4 << 20,
        roce_dscp=ROCE, cnp_dscp=CNP, kmin=5_000, kmax=60_000, pmax=0.2, ecn_tcs=(3,),
        ecn_off=(), xoff=XOFF, xon=XON, pfc_enabled=True, pfc_off=(), dcqcn_profile="nvidia",
        dcqcn_off=(), ecn_enabled=True)
    return Plan(lab=LAB, addressing=Addressing.UNNUMBERED, speed_bps=cp.speed_bps, mtu=1500,
                bfd_enabled=False, bfd_interval_ms=300, bfd_multiplier=3, bgp_keepalive=3,
                bgp_hold=9, loopback_pool="10.255.0.0/24", host_pool="10.77.0.0/24",
                fabric_pool=None, nodes=(sw, *hosts),
                links=tuple(Link("sw", h, h, "eth0", fabric=False) for h in HOSTS),
                congestion=cp)


def _prepare() -> None:
    """Inside each new namespace: the lab's tag, and no IPv6 (no ND/MLD chatter in the counts)."""
    for key in ("all", "default"):
        with open(f"/proc/sys/net/ipv6/conf/{key}/disable_ipv6", "w") as f:
            f.write("1")
    with IPRoute() as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], ifalias=f"{NS_TAG_PREFIX}{LAB}",
                 state="up")


def _build(plan: Plan) -> None:
    sw = plan.node("sw")
    fds = {h: netns.open_fd(plan.node(h).netns) for h in HOSTS}
    try:
        with netns.entered(sw.netns), IPRoute() as ipr:
            ipr.link("add", ifname="br0", kind="bridge", br_stp_state=0)
            br = ipr.link_lookup(ifname="br0")[0]
            for port in sw.interfaces:
                host_port = plan.node(port.peer).interface(port.peer_ifname)
                ipr.link("add", ifname=port.name, kind="veth", address=port.mac,
                         peer={"ifname": host_port.name, "net_ns_fd": fds[port.peer],
                               "address": host_port.mac})
                ipr.link("set", index=ipr.link_lookup(ifname=port.name)[0], master=br, state="up")
            ipr.link("set", index=br, state="up")
    finally:
        for fd in fds.values():
            os.close(fd)
    for h in HOSTS:
        with netns.entered(plan.node(h).netns), IPRoute() as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="eth0")[0], state="up")

    def all_up() -> bool:
        for node in plan.nodes:
            with netns.entered(node.netns), IPRoute() as ipr:
                for port in node.interfaces:
                    link = ipr.get_links(ipr.link_lookup(ifname=port.name)[0])[0]
                    if link.get_attr("IFLA_OPERSTATE") != "UP":
                        return False
        return True

    poll(all_up, timeout=10, what="every port up")


def _teardown(plan: Plan) -> None:
    for node in plan.nodes:
        netns.remove(node.netns)
    shutil.rmtree(lab_run_dir(LAB), ignore_errors=True)


@pytest.fixture
def bridged():
    """A fresh bridged segment with its controller (fresh maps: every counter starts at 0)."""
    plan = _plan()
    ctl = None
    try:
        lab_run_dir(LAB).mkdir(parents=True)
        for node in plan.nodes:
            netns.create(node.netns, init=_prepare)
        _build(plan)
        ctl = Controller(plan)
        ctl.setup()
        reader = StatsReader(plan)
        yield plan, ctl, reader
        reader.close()
    finally:
        if ctl is not None:
            ctl.close()
        _teardown(plan)


# -- frames and counters ------------------------------------------------------------------------

BROADCAST = "ff:ff:ff:ff:ff:ff"


def _frame(src_mac: str, dst_mac: str, dscp: int, ecn: int, size: int) -> bytes:
    """An IPv4/UDP frame of `size` bytes (valid checksum: bridge netfilter checks it) to an
    address no host has, so the receiver drops it silently and answers nothing."""
    payload = size - 14 - 20 - 8
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, dscp << 2 | ecn, 28 + payload, 0, 0x4000, 64, 17, 0,
                     socket.inet_aton("192.0.2.1"), socket.inet_aton("192.0.2.2"))
    words = sum(struct.unpack("!10H", ip))
    words = (words & 0xFFFF) + (words >> 16)
    ip = ip[:10] + struct.pack("!H", ~((words & 0xFFFF) + (words >> 16)) & 0xFFFF) + ip[12:]
    udp = struct.pack("!HHHH", 4791, 4791, 8 + payload, 0)
    return (bytes.fromhex(dst_mac.replace(":", "")) + bytes.fromhex(src_mac.replace(":", ""))
            + b"\x08\x00" + ip + udp + bytes(payload))


def _send(plan: Plan, host: str, dst_mac: str, count: int = 1, dscp: int = ROCE, ecn: int = 0,
          size: int = 200) -> None:
    port = plan.node(host).interfaces[0]
    with netns.entered(plan.node(host).netns):
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    with sock:
        sock.bind((port.name, 0))
        for _ in range(count):
            sock.send(_frame(port.mac, dst_mac, dscp, ecn, size))


def _mac(plan: Plan, host: str) -> str:
    return plan.node(host).interfaces[0].mac


def _counters(reader: StatsReader) -> dict[tuple[str, int], dict[str, int]]:
    return {(f"{p.node}:{p.port}", p.tc): p.values for p in reader.read(TCS)}


def _field(reader: StatsReader, name: str, tc: int) -> dict[str, int]:
    """{port: value} of one counter in one TC, zeros left out."""
    return {port: v[name] for (port, t), v in _counters(reader).items() if t == tc and v[name]}


def _unbalanced(reader: StatsReader) -> dict[str, tuple[int, int]]:
    """(queued, buffered) of every port and TC where either is not 0."""
    return {f"{port}/tc{tc}": (v["queued"], v["buffered"]) for (port, tc), v in
            _counters(reader).items() if v["queued"] or v["buffered"]}


def _wait_settled(reader: StatsReader, ctl: Controller | None = None, timeout: float = 10.0):
    """Every queue drained and every switch buffer released: the accounting balances."""
    def check():
        if ctl is not None:
            ctl.poll(20)
        return not _unbalanced(reader)

    try:
        poll(check, timeout=timeout, what="queued and buffered back to 0")
    except AssertionError:
        raise AssertionError(f"accounting does not balance: (queued, buffered) left "
                             f"{_unbalanced(reader)}") from None


# -- tests ----------------------------------------------------------------------------------------

def test_flooded_frames_count_on_every_port_they_leave(bridged):
    plan, _, reader = bridged
    _send(plan, "a", BROADCAST, dscp=0, size=300)  # broadcast, lossy class
    _send(plan, "a", _mac(plan, "b"), dscp=ROCE, size=200)  # unknown unicast: b never spoke
    _wait_settled(reader)

    # a's port sent each frame once; the switch sent a copy out of every other port.
    assert _field(reader, "tx_packets", 0) == {"a:eth0": 1, "sw:b": 1, "sw:c": 1}
    assert _field(reader, "tx_bytes", 0) == {"a:eth0": 300, "sw:b": 300, "sw:c": 300}
    assert _field(reader, "tx_packets", 3) == {"a:eth0": 1, "sw:b": 1, "sw:c": 1}
    assert _field(reader, "tx_bytes", 3) == {"a:eth0": 200, "sw:b": 200, "sw:c": 200}
    # Both copies were held by the switch on behalf of its ingress port sw:a (skb->tc_index
    # crossed the bridge and the flood's clones), and released at the hosts' ingress.
    held = _field(reader, "max_buffered", 3)
    assert set(held) == {"sw:a"} and held["sw:a"] >= 200, held
    assert set(_field(reader, "max_buffered", 0)) == {"sw:a"}


def test_learned_unicast_is_charged_to_its_egress_and_ingress_ports(bridged):
    plan, _, reader = bridged
    _send(plan, "b", _mac(plan, "a"), dscp=0)  # the bridge learns b (a unknown: flooded)
    _wait_settled(reader)
    assert _field(reader, "tx_packets", 0) == {"b:eth0": 1, "sw:a": 1, "sw:c": 1}

    _send(plan, "a", _mac(plan, "b"), count=3, dscp=ROCE, ecn=3, size=400)  # CE-marked
    _wait_settled(reader)
    # b is learned: the switch sends a's frames out of sw:b only, and charges sw:b, not a:eth0.
    assert _field(reader, "tx_packets", 3) == {"a:eth0": 3, "sw:b": 3}
    assert _field(reader, "tx_bytes", 3) == {"a:eth0": 1200, "sw:b": 1200}
    # CE arrivals land on the ports they came in through: the switch's sw:a, then b's eth0.
    assert _field(reader, "rx_ce", 3) == {"sw:a": 3, "b:eth0": 3}
    assert set(_field(reader, "max_buffered", 3)) == {"sw:a"}


def test_pfc_through_the_bridge_pauses_the_senders_and_marks_the_congested_port(bridged):
    """A 2-to-1 incast into b: the switch's queue toward b fills, the bytes it holds are
    charged to the ingress ports sw:a and sw:c, which cross XOFF, so the controller pauses a
    and c (never b), and RED marks on sw:b."""
    plan, ctl, reader = bridged
    _send(plan, "b", BROADCAST, dscp=0)  # the bridge learns b
    _wait_settled(reader)
    n, size = 80, 1000
    for host in ("a", "c"):
        _send(plan, host, _mac(plan, "b"), count=n, dscp=ROCE, ecn=2, size=size)

    def delivered():
        ctl.poll(20)
        return _field(reader, "tx_packets", 3).get("sw:b", 0) >= 2 * n

    poll(delivered, timeout=30, interval=0.01, what=f"{2 * n} frames out of sw:b")
    _wait_settled(reader, ctl)
    poll(lambda: (ctl.poll(20), not ctl.paused_since)[1], timeout=10, what="every pause resumed")

    tx = _field(reader, "tx_packets", 3)
    assert tx["sw:b"] == 2 * n and tx["a:eth0"] >= n and tx["c:eth0"] >= n  # + kick frames
    assert set(tx) == {"sw:b", "a:eth0", "c:eth0"}, tx
    held = _field(reader, "max_buffered", 3)
    assert set(held) == {"sw:a", "sw:c"} and max(held.values()) > XOFF, held

    assert ctl.pauses >= 1
    assert set(ctl.paused_s) <= {"a:eth0:3", "c:eth0:3"} and ctl.paused_s, ctl.paused_s
    pause_tx = _field(reader, "pause_tx", 0)  # 802.1Qbb frames: out of the switch's ports ...
    assert pause_tx and set(pause_tx) <= {"sw:a", "sw:c"}, pause_tx
    pause_rx = _field(reader, "pause_rx", 3)  # ... and into the paused hosts'
    assert {p.replace("sw:", "") + ":eth0" for p in pause_tx} == set(pause_rx), pause_rx
    assert sum(pause_rx.values()) == sum(pause_tx.values()) == 2 * ctl.pauses

    marked = _field(reader, "ce_marked", 3)
    assert set(marked) == {"sw:b"}, marked
    assert _field(reader, "rx_ce", 3) == {"b:eth0": marked["sw:b"]}
