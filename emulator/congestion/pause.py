"""Pausing a port from outside the controller: a host that stops draining.

A decode host that stops draining its receive ring makes its NIC send PFC
XOFF to the leaf: the leaf's lossless class toward that host stops, its
queue fills, the leaf pauses its own upstreams, and the pause spreads.
"""

from __future__ import annotations

import socket

from pyroute2 import IPRoute

from .. import netns
from ..plan import Node, Plan
from . import qos


def set_drain(plan: Plan, host: Node, draining: bool) -> None:
    assert plan.congestion is not None
    port = host.interfaces[0]
    leaf = plan.node(port.peer)
    leaf_port = leaf.interface(port.peer_ifname)
    with netns.entered(leaf.netns), IPRoute() as ipr:
        idx = socket.if_nametoindex(leaf_port.name)
        qos.set_pause(ipr, idx, qos.of_port(plan.congestion, leaf_port.speed_bps),
                      plan.port_mtu(leaf_port), paused=not draining)
        if draining:  # TBF restarts only on an enqueue
            with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as raw:
                raw.bind((leaf_port.name, 0))
                raw.send(qos.kick_frame(leaf_port.mac, port.mac, plan.congestion.roce_dscp))
    with netns.entered(host.netns), socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as raw:
        raw.bind((port.name, 0))  # the 802.1Qbb frame the host's NIC would send
        raw.send(qos.pfc_frame(port.mac, 3, 0 if draining else 0xFFFF))
