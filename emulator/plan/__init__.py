"""The plan: a validated Topology compiled into a frozen, fully resolved Plan.

Pure and deterministic (no root, no I/O), split by job:

    records     the frozen Plan and its nodes, interfaces, links, routes
    kinds       Kind (superspine, spine, leaf, host) and Homing (single, rail, dual)
    compiler    compile_plan: the table of contents of planning, which calls
      checks      semantic checks the schema cannot express
      skeleton    nodes and links, generated (a Clos) or the file's own
      knobs       per-node routing knobs (overrides:) and ASNs
      addresses   loopbacks, wiring, /31s, the hosts' addresses and routes
      congestion  the congestion plan (time dilation, ECN, PFC, DCQCN numbers)
    routing     the routing model the Plan answers for: fib_targets,
                expected_widths (an eBGP path-vector), stp_tree

`from emulator.plan import X` works for every public name below.
"""

from __future__ import annotations

from .compiler import STP_PRIORITY_LEAF, STP_PRIORITY_ROOT, STP_PRIORITY_SPINE, compile_plan
from .congestion import CongestionPlan
from .kinds import Homing, Kind
from .knobs import FIRST_PRIVATE_32, LAST_PRIVATE_16, MAX_ASN
from .nodes import BRIDGE, HOST_IFNAME, VXLAN_OVERHEAD, Interface, L2Plan, Link, Node, Route
from .records import Plan

__all__ = [
    "BRIDGE", "FIRST_PRIVATE_32", "HOST_IFNAME", "LAST_PRIVATE_16", "MAX_ASN", "STP_PRIORITY_LEAF",
    "STP_PRIORITY_ROOT", "STP_PRIORITY_SPINE", "VXLAN_OVERHEAD", "CongestionPlan", "Homing",
    "Interface", "Kind", "L2Plan", "Link", "Node", "Plan", "Route", "compile_plan",
]
