"""Realize a Plan in the kernel: namespaces, veths, addresses, sysctls.

Namespaces are built in parallel (each worker thread enters its namespace;
see netns.py); veths are created from the calling thread by raw rtnetlink
requests, batched (rtnl_link.py), with *both* ends placed directly in their
namespaces, so the root namespace never holds a lab device, not even
briefly. A node's addresses, routes and neighbour pins go as one batch of
raw requests from inside its namespace (rtnl_conf.py). Every
namespace is tagged (lo's ifalias = rocelab:<lab>) before it becomes
visible under /run/netns, so `down` can find it from kernel state.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from collections.abc import Callable, Iterable

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from . import bridge, neighbours, netns, rtnl_conf, rtnl_link
from .errors import RealizeError
from .netns import parallel
from .paths import NS_TAG_PREFIX
from .plan import Link, Node, Plan
from .progress import Progress, steps
from .spec import EcmpHash, FabricMode

NUD_PERMANENT = 0x80

# Set inside each namespace before any veth exists (accept_dad: addresses usable at once).
COMMON_SYSCTLS = {
    "net/ipv6/conf/all/accept_dad": "0",
    "net/ipv6/conf/default/accept_dad": "0",
    "net/ipv6/conf/all/disable_ipv6": "0",
    "net/ipv6/conf/default/disable_ipv6": "0",
    "net/ipv4/conf/all/rp_filter": "0",
    "net/ipv4/conf/default/rp_filter": "0",
}
ROUTER_SYSCTLS = {
    "net/ipv4/ip_forward": "1",
    "net/ipv6/conf/all/forwarding": "1",
    "net/ipv4/conf/all/ignore_routes_with_linkdown": "1",  # carrier loss drops a path at once
    "net/ipv4/conf/default/ignore_routes_with_linkdown": "1",
}


# An l2 fabric's switches are bridges: no IP of their own, so no IPv6 link-local chatter
# (router solicitations, MLD) from their ports filling the MAC tables the demos measure.
BRIDGE_SWITCH_SYSCTLS = {
    "net/ipv6/conf/all/disable_ipv6": "1",
    "net/ipv6/conf/default/disable_ipv6": "1",
}


# Written only where the kernel has them (6.11+): a fixed ECMP hash seed makes
# which spine a flow takes reproducible from run to run.
OPTIONAL_ROUTER_SYSCTLS = {"net/ipv4/fib_multipath_hash_seed": "1234567"}


def write_sysctls(values: dict[str, str], optional: dict[str, str] | None = None) -> None:
    """Write sysctls of the calling thread's current network namespace."""
    for key, value in values.items():
        with open(f"/proc/sys/{key}", "w") as f:
            f.write(value)
    for key, value in (optional or {}).items():
        try:
            with open(f"/proc/sys/{key}", "w") as f:
                f.write(value)
        except FileNotFoundError:
            pass


def hash_sysctls(node: Node) -> dict[str, str]:
    """The multipath hash: l4 (five-tuple: RoCE's UDP source port spreads QPs over the
    paths) or l3 (addresses only: every QP between two hosts takes one path)."""
    policy = "1" if node.ecmp_hash is EcmpHash.L4 else "0"
    return {"net/ipv4/fib_multipath_hash_policy": policy,
            "net/ipv6/fib_multipath_hash_policy": policy}


# A routed fabric's hosts speak IPv4 only. With IPv6 on, every host link trades router
# solicitations and neighbour entries for nothing (1,152 of them on a 576-host fabric:
# the host-wide IPv6 table overflowed and BGP unnumbered lost its peers).
L3_HOST_SYSCTLS = {
    "net/ipv6/conf/all/disable_ipv6": "1",
    "net/ipv6/conf/default/disable_ipv6": "1",
}


# A multi-homed host drops the next hop of a leaf whose link lost carrier, as routers do.
MULTIHOMED_HOST_SYSCTLS = {
    "net/ipv4/conf/all/ignore_routes_with_linkdown": "1",
    "net/ipv4/conf/default/ignore_routes_with_linkdown": "1",
}


def _tag_and_prepare(plan: Plan, node: Node) -> Callable[[], None]:
    def init() -> None:
        if node.is_router and not plan.routed:
            write_sysctls(COMMON_SYSCTLS | BRIDGE_SWITCH_SYSCTLS)
        elif node.is_router:
            write_sysctls(COMMON_SYSCTLS | ROUTER_SYSCTLS | hash_sysctls(node),
                          OPTIONAL_ROUTER_SYSCTLS)
        else:
            write_sysctls(COMMON_SYSCTLS
                          | (L3_HOST_SYSCTLS if plan.fabric is FabricMode.L3 else {})
                          | (MULTIHOMED_HOST_SYSCTLS | hash_sysctls(node)
                             if len(node.interfaces) > 1 else {}))
        up = rtnl_conf.link_up_request(socket.if_nametoindex("lo"), 1,
                                       alias=f"{NS_TAG_PREFIX}{plan.lab}")
        _send(node, [("lo up, tagged", up)])
    return init


Tick = Callable[[], None]  # one more done (progress)


def _nothing() -> None:
    pass


def create_namespaces(plan: Plan, undo: contextlib.ExitStack, tick: Tick = _nothing) -> None:
    def one(node: Node) -> None:
        try:
            netns.create(node.netns, init=_tag_and_prepare(plan, node))
        except FileExistsError:
            raise RealizeError(f"namespace {node.netns} already exists") from None
        except OSError as e:
            raise RealizeError(f"cannot create namespace {node.netns}: {e}") from None
        undo.callback(netns.remove, node.netns)
        tick()

    parallel(one, plan.nodes)


def create_links(plan: Plan, tick: Tick = _nothing) -> None:
    """Make every veth with both ends already inside their namespaces."""
    fds = {n.name: netns.open_fd(n.netns) for n in plan.nodes}
    failed: list[tuple[int, int]] = []

    def done(i: int, code: int) -> None:
        if code:
            failed.append((i, code))
        tick()

    try:
        rtnl_link.create_veths([_ends(plan, link, fds) for link in plan.links], done)
    except OSError as e:
        raise RealizeError(f"cannot create links: {e}") from None
    finally:
        for fd in fds.values():
            os.close(fd)
    if failed:
        link, code = plan.links[min(failed)[0]], min(failed)[1]
        raise RealizeError(f"cannot create link {link.a}:{link.a_ifname} - {link.b}:{link.b_ifname}: "
                           f"{os.strerror(code)}")


def _ends(plan: Plan, link: Link, fds: dict[str, int]) -> tuple[rtnl_link.End, rtnl_link.End]:
    a = plan.node(link.a).interface(link.a_ifname)
    b = plan.node(link.b).interface(link.b_ifname)
    return (rtnl_link.End(link.a_ifname, fds[link.a], plan.port_mtu(a), a.mac),
            rtnl_link.End(link.b_ifname, fds[link.b], plan.port_mtu(b), b.mac))


def _configure(plan: Plan, node: Node) -> None:
    with netns.entered(node.netns):
        _send(node, _requests(plan, node))
        if node.is_router and plan.fabric is FabricMode.L3:  # a leaf's host ports: IPv4 only
            write_sysctls({f"net/ipv6/conf/{p.name}/disable_ipv6": "1"
                           for p in node.interfaces if not p.fabric})
        if node.bridge:
            with IPRoute() as ipr:
                bridge.create(ipr, plan, node)


def _requests(plan: Plan, node: Node) -> list[tuple[str, bytes]]:
    """(what, request) for the node's addresses, peer ends up, routes and neighbour pins,
    in the order the kernel must apply them (request i has sequence number i + 1);
    ifindexes by if_nametoindex (an ioctl in this thread's namespace)."""
    index = socket.if_nametoindex
    b_side = {link.b_ifname for link in plan.links if link.b == node.name}
    out: list[tuple[str, bytes]] = []
    if node.loopback:
        out.append((f"address {node.loopback}/32 on lo",
                    rtnl_conf.addr_request(index("lo"), f"{node.loopback}/32", len(out) + 1)))
    for port in node.interfaces:
        if port.address:
            out.append((f"address {port.address} on {port.name}",
                        rtnl_conf.addr_request(index(port.name), port.address, len(out) + 1)))
        if port.name in b_side:  # the peer end of a veth is created down (rtnl_link)
            out.append((f"{port.name} up", rtnl_conf.link_up_request(index(port.name), len(out) + 1)))
    for route in node.routes:
        via = [(gw, index(dev)) for gw, dev in route.via]
        out.append((f"route {route.dst}", rtnl_conf.route_request(route.dst, via, len(out) + 1)))
    for pin in neighbours.pins(plan, node):
        family = socket.AF_INET6 if pin.family == "ipv6" else socket.AF_INET
        out.append((f"neighbour {pin.address} on {pin.port}", rtnl_conf.neigh_request(
            family, pin.address, pin.mac, index(pin.port), len(out) + 1)))
    return out


def _send(node: Node, requests: list[tuple[str, bytes]]) -> None:
    failed: list[tuple[int, int]] = []

    def done(i: int, code: int) -> None:
        if code and not (code == errno.EEXIST and requests[i][0].startswith("address")):
            failed.append((i, code))

    rtnl_link.send_all([msg for _, msg in requests], done)
    if failed:
        i, code = min(failed)
        raise RealizeError(f"cannot configure {node.name}: {requests[i][0]}: {os.strerror(code)}")


def pin_neighbours(ipr: IPRoute, plan: Plan, node: Node, ports: Iterable[str] | None = None) -> None:
    """The node's permanent neighbour entries (neighbours.pins: exempt from the host's limit)."""
    for pin in neighbours.pins(plan, node, ports):
        ipr.neigh("replace", dst=pin.address, lladdr=pin.mac, state=NUD_PERMANENT,
                  ifindex=socket.if_nametoindex(pin.port),
                  family=socket.AF_INET6 if pin.family == "ipv6" else socket.AF_INET)


def configure_nodes(plan: Plan, tick: Tick = _nothing) -> None:
    def one(node: Node) -> None:
        try:
            _configure(plan, node)
        except (NetlinkError, OSError) as e:
            raise RealizeError(f"cannot configure {node.name}: {e}") from None
        tick()

    parallel(one, plan.nodes)


def realize(plan: Plan, undo: contextlib.ExitStack, progress: Progress = lambda _: None) -> None:
    """Namespaces (tagged), then wires, then addresses and routes; each counted (progress)."""
    with steps(progress, "namespaces", len(plan.nodes), "created") as phase:
        create_namespaces(plan, undo, phase.advance)
    with steps(progress, "links", len(plan.links), "created") as phase:
        create_links(plan, phase.advance)
    with steps(progress, "addresses and routes", len(plan.nodes), "nodes") as phase:
        configure_nodes(plan, phase.advance)
