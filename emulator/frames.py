"""Raw Ethernet frames from a lab host, for the L2 demos (broadcasts, MAC churn).

A packet socket opened inside the host's namespace sends on its eth0 only, so
nothing leaves the lab. Every frame is addressed inside the lab's own L2
domain: ARP requests (broadcast) for an address of the lab's host pool, and
churn frames from made-up locally administered source MACs (02:52:4d:...,
rocelab's prefix with the next byte changed, so they can never be a port's).
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import threading
import time

from . import netns
from .plan import HOST_IFNAME, Node, Plan

ETH_P_ARP = 0x0806
ETH_P_CHURN = 0x88B5  # IEEE 802 local experimental ethertype: nobody's stack consumes it
BROADCAST = b"\xff" * 6
MIN_FRAME = 60  # without FCS
CHURN_MAC_PREFIX = b"\x02\x52\x4d"


def _mac_bytes(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


def arp_request(src_mac: str, src_ip: str, target_ip: str, size: int = MIN_FRAME) -> bytes:
    """A broadcast ARP who-has, padded to `size` bytes: the BUM frame every L2 domain floods."""
    mac = _mac_bytes(src_mac)
    arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, mac,
                      socket.inet_aton(src_ip), b"\0" * 6, socket.inet_aton(target_ip))
    frame = BROADCAST + mac + struct.pack("!H", ETH_P_ARP) + arp
    return frame.ljust(max(size, MIN_FRAME), b"\0")


def churn_mac(i: int) -> bytes:
    return CHURN_MAC_PREFIX + i.to_bytes(3, "big")


def churn_frame(i: int, dst: bytes = BROADCAST) -> bytes:
    """A minimal frame from made-up source MAC number `i`: a switch learns (or cannot learn) it."""
    return (dst + churn_mac(i) + struct.pack("!H", ETH_P_CHURN)).ljust(MIN_FRAME, b"\0")


def unused_address(plan: Plan) -> str:
    """An address of the host pool no host has: ARP for it is never answered."""
    used = {h.address for h in plan.hosts}
    net = ipaddress.IPv4Network(plan.host_pool)
    last = net.broadcast_address - 1  # the pool's highest host address: counting down
    for i in range(min(256, max(0, net.num_addresses - 2))):
        if str(last - i) not in used:
            return str(last - i)
    raise ValueError(f"no free address in {plan.host_pool}")


def _socket(host: Node) -> socket.socket:
    with netns.entered(host.netns):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.bind((HOST_IFNAME, 0))
    return s


def send_paced(host: Node, frames: list[bytes], pps: float,
               stop: threading.Event | None = None) -> int:
    """Send `frames` from `host`'s eth0 at `pps` frames per second (0: as fast as possible);
    returns how many went out (fewer if `stop` was set)."""
    sent = 0
    start = time.monotonic()
    with _socket(host) as s:
        for frame in frames:
            if stop is not None and stop.is_set():
                break
            if pps > 0:
                delay = start + sent / pps - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            try:
                s.send(frame)
            except OSError:  # a full queue (shaped port) drops, as a NIC would
                pass
            sent += 1
    return sent


def broadcast_burst(plan: Plan, host: Node, count: int, pps: float, size: int = MIN_FRAME) -> int:
    """`count` broadcast ARP requests of `size` bytes from `host` (for an address nobody has)."""
    frame = arp_request(host.interfaces[0].mac, host.address or "0.0.0.0", unused_address(plan),
                        size)
    return send_paced(host, [frame] * count, pps)


class MacChurn(threading.Thread):
    """Frames from `macs` made-up source MACs, round robin at `pps`, until stopped: a
    bystander that keeps every switch's MAC table full."""

    def __init__(self, host: Node, macs: int, pps: float):
        super().__init__(name=f"churn-{host.name}", daemon=True)
        self.host, self.macs, self.pps = host, macs, pps
        self.stop_event = threading.Event()
        self.sent = 0

    def run(self) -> None:
        frames = [churn_frame(i) for i in range(self.macs)]
        while not self.stop_event.is_set():
            self.sent += send_paced(self.host, frames, self.pps, self.stop_event)

    def stop(self) -> int:
        self.stop_event.set()
        self.join(5)
        return self.sent
