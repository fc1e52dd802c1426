"""Questions and knobs on the forwarding plane of a running lab.

- which spine a flow takes: the kernel's own multipath choice for the flow's
  five-tuple (`ip route get ... ipproto udp sport S dport D iif PORT` on the
  ingress leaf; pyroute2's rtmsg does not know RTA_SPORT/RTA_DPORT yet); on
  an l2 fabric the port the leaf's bridge learned the destination MAC on
  (the spanning tree decides, not the flow); on evpn not knowable from here
  (the kernel hashes the inner frame into the VXLAN source port);
- random loss on a router (nftables `numgen random`: this kernel has no netem);
- interface counters per node.
"""

from __future__ import annotations

import json
import subprocess
from socket import AF_BRIDGE

from pyroute2 import IPRoute

from . import netns
from .errors import RocelabError
from .plan import Homing, Node, Plan
from .spec import FabricMode

ROCE_PORT = 4791
LOSS_TABLE = "rocelab_loss"


def _run_in(node: Node, argv: list[str], stdin: str | None = None) -> str:
    with netns.entered(node.netns):
        res = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=10)
    if res.returncode != 0:
        raise RocelabError(f"{argv[0]} on {node.name} failed: {res.stderr.strip()}")
    return res.stdout


def egress_port(plan: Plan, src: Node, dst: Node, sport: int, dport: int = ROCE_PORT,
                rail: int | None = None) -> str | None:
    """The port (an uplink is named after its spine) src's leaf picks for this UDP flow;
    None where the fabric does not say (evpn; l2 before the destination's MAC was
    learned). `rail`: a multi-NIC host's QP on NIC `rail` (to the peer's NIC of that
    index), which enters the fabric at that rail's leaf; on a multi-plane fabric NIC k is
    plane k, so rail=k answers with a spine of plane k (`p<k>spine<i>`)."""
    nic = src.interfaces[rail] if rail is not None else src.interfaces[0]
    if src.homing is Homing.DUAL and plan.fabric is FabricMode.L3:  # the host's own ECMP picks
        dev = _route_dev(src, ["from", src.address or "", "ipproto", "udp", "sport", str(sport),
                               "dport", str(dport)], dst.address or "")
        nic = src.interface(dev)
    leaf = plan.node(nic.peer)
    if plan.fabric is FabricMode.L2:
        return learned_port(leaf, dst.interfaces[0].mac)
    if plan.fabric is FabricMode.EVPN:
        return None
    src_ip = src.addresses[rail % len(src.addresses)] if rail is not None else src.address
    dst_ip = dst.addresses[rail % len(dst.addresses)] if rail is not None else dst.address
    return _route_dev(leaf, ["from", src_ip or "", "iif", nic.peer_ifname, "ipproto", "udp",
                             "sport", str(sport), "dport", str(dport)], dst_ip or "")


def egress_ports(plan: Plan, src: Node, dst: Node, sports: list[int],
                 rail: int | None = None) -> list[str | None]:
    """`egress_port` for many UDP source ports (an MRC connection's EVs) with one
    `ip -batch` in the leaf on a routed fabric with a single-homed source; one by one
    elsewhere."""
    if plan.fabric is not FabricMode.L3 or src.homing is Homing.DUAL or len(sports) < 2:
        return [egress_port(plan, src, dst, s, rail=rail) for s in sports]
    nic = src.interfaces[rail] if rail is not None else src.interfaces[0]
    src_ip = src.addresses[rail % len(src.addresses)] if rail is not None else src.address
    dst_ip = dst.addresses[rail % len(dst.addresses)] if rail is not None else dst.address
    batch = "".join(f"route get {dst_ip} from {src_ip} iif {nic.peer_ifname} ipproto udp "
                    f"sport {int(s)} dport {ROCE_PORT}\n" for s in sports)
    out = _run_in(plan.node(nic.peer), ["ip", "-j", "-batch", "-"], stdin=batch)
    devs = [str(json.loads(line)[0]["dev"]) for line in out.splitlines() if line.strip()]
    if len(devs) != len(sports):
        raise RocelabError(f"ip -batch on {nic.peer}: {len(devs)} routes for {len(sports)} ports")
    return list(devs)


def _route_dev(node: Node, selectors: list[str], dst: str) -> str:
    """The device `node`'s kernel sends a packet to `dst` out of (`ip route get`)."""
    out = _run_in(node, ["ip", "-j", "route", "get", dst, *selectors])
    return str(json.loads(out)[0]["dev"])


def sports_via(plan: Plan, src: Node, dst: Node, via: str, n: int,
               first: int = 49152) -> list[int]:
    """`n` UDP source ports whose src -> dst packets src's leaf sends to spine `via`.

    A RoCE NIC takes the source port from the QP's flow label; picking it is
    how a test pins a QP to a path through the fabric's ECMP.
    """
    if plan.fabric is FabricMode.L2:  # no choice to make: the tree's path must cross it
        path = tree_uplink(plan, src, dst)
        if path != via:
            raise RocelabError(f"via: on fabric l2 the spanning tree sends {src.name} -> "
                               f"{dst.name} through {path}, not {via} (no ECMP to steer)")
        return [first + i for i in range(n)]
    if plan.fabric is not FabricMode.L3:
        raise RocelabError("via: needs fabric l3 or l2 (on evpn the kernel hashes the inner "
                           "frame into the VXLAN source port)")
    found: list[int] = []
    for sport in range(first, min(65536, first + 64 * n + 256)):
        if egress_port(plan, src, dst, sport) == via:
            found.append(sport)
            if len(found) == n:
                return found
    raise RocelabError(f"via: no UDP source port takes {src.name} -> {dst.name} through {via} "
                       f"(is {via} a next hop of {src.leaf}?)")


def tree_uplink(plan: Plan, src: Node, dst: Node) -> str | None:
    """On a healthy l2 fabric, the uplink src's leaf uses toward dst's leaf (None: same leaf)."""
    if src.leaf == dst.leaf:
        return None
    tree = plan.stp_tree()
    leaf = plan.node(src.leaf or "")
    up = [p.name for p in leaf.interfaces if p.fabric and tree[leaf.name][p.name] == "forwarding"]
    # A leaf is never designated toward a spine nearer the root: its one forwarding uplink
    # toward the root is the root port; a leaf that is itself the root reaches every spine.
    other = plan.node(dst.leaf or "")
    return next((s for s in up if tree[s][other.name] == "forwarding"
                 and tree[s][leaf.name] == "forwarding"), None) if up else None


def learned_port(switch: Node, mac: str) -> str | None:
    """The bridge port a switch learned `mac` on (None: unknown, frames to it flood)."""
    with netns.entered(switch.netns), IPRoute() as ipr:
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
        for entry in ipr.get_neighbours(family=AF_BRIDGE):
            if entry.get_attr("NDA_LLADDR") == mac and entry.get_attr("NDA_MASTER"):
                return names.get(entry["ifindex"])
    return None


def set_loss(node: Node, percent: float, iifname: str | None = None,
             roce_only: bool = False) -> None:
    """Drop `percent` % of forwarded packets at random (optionally only those
    arriving on one port, or only RoCEv2: UDP to port 4791)."""
    if not 0 < percent <= 100:
        raise RocelabError(f"loss: percent must be in (0, 100] (got {percent})")
    match = (f'iifname "{iifname}" ' if iifname else "") + (
        f"udp dport {ROCE_PORT} " if roce_only else "")
    threshold = round(percent * 100)  # numgen over 10000: 0.01 % steps
    chance = f"numgen random mod 10000 < {threshold} " if threshold < 10000 else ""
    ruleset = (f"table inet {LOSS_TABLE}\ndelete table inet {LOSS_TABLE}\n"
               f"table inet {LOSS_TABLE} {{\n chain forward {{\n"
               f"  type filter hook forward priority -100; policy accept;\n"
               f"  {match}{chance}counter drop\n }}\n}}\n")
    _run_in(node, ["nft", "-f", "-"], stdin=ruleset)


def clear_loss(node: Node) -> None:
    _run_in(node, ["nft", "-f", "-"],
            stdin=f"table inet {LOSS_TABLE}\ndelete table inet {LOSS_TABLE}\n")


def loss_dropped(node: Node) -> int:
    """Packets the loss rule dropped so far (0 if no loss is set)."""
    out = _run_in(node, ["nft", "-j", "list", "ruleset"])
    total = 0
    for item in json.loads(out).get("nftables", []):
        rule = item.get("rule")
        if rule and rule.get("table") == LOSS_TABLE:
            total += sum(e["counter"]["packets"] for e in rule["expr"] if "counter" in e)
    return total


def port_counters(node: Node) -> dict[str, dict[str, int]]:
    """ifname -> {tx_packets, rx_packets, tx_bytes, rx_bytes, drops} for every port of a node."""
    with netns.entered(node.netns), IPRoute() as ipr:
        links = ipr.get_links()
    out = {}
    for link in links:
        st = link.get_attr("IFLA_STATS64") or {}
        out[link.get_attr("IFLA_IFNAME")] = {
            "tx_packets": st.get("tx_packets", 0), "rx_packets": st.get("rx_packets", 0),
            "tx_bytes": st.get("tx_bytes", 0), "rx_bytes": st.get("rx_bytes", 0),
            "drops": st.get("tx_dropped", 0) + st.get("rx_dropped", 0)}
    return out
