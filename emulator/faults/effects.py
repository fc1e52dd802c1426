"""What a fault does to ports, in the kernel: apply, undo, and read back.

Two effects, each on one port of one lab node:

  DOWN  the port is set administratively down (its veth peer also loses
        carrier). A carrier fault downs both router ends of a link: a router
        sees its own port go down at once, while a peer's carrier loss goes
        through the kernel's linkwatch, which rate-limits such events to one
        batch a second. Only router ports are ever set down: a host that
        loses its own eth0 also loses its default route.
  DROP  every frame arriving on the port is dropped before the stack sees
        it: a netdev-family nftables chain `in_<port>` on the port's ingress
        hook, in a table `rocelab_fault` in the node's own namespace. On both
        ends of a link this is a silent failure: carrier stays up, and BGP
        keepalives, BFD, ND/ARP and data all vanish, in both directions, and
        whether forwarded or addressed to the router.

Three gray effects degrade a port that stays up (routing keeps the link):

  LOSS     a share of the frames arriving on the port dropped at random: a
           netdev ingress chain `loss_<port>`, `numgen random` against the
           share in millionths;
  CORRUPT  a share of the RoCE frames arriving on the port altered: chain
           `corrupt_<port>` rewrites the BTH partition key (an invariant
           field the ICRC covers) to 0, so the receiver's ICRC check fails and
           it drops the frame, as a NIC does a frame a bad optic garbled;
  RATE     the port sends at most the rate: an HTB root qdisc (handle 1f:)
           with one class at that rate, queueing what exceeds it as a link
           that trained down to a lower speed does. On a shaped lab the port
           already has the congestion plane's tree: its class 1:1 (the line
           rate every TC borrows from) is set to the rate instead, so ECN,
           pauses and DCQCN see the slow port; the value is the shaped (wall)
           rate, real-equivalent / D (model.wall_rate).

The chains keep the share in their rule's comment, the qdisc its rate, so
`scan` reads each effect back whole from the kernel. The kernel has no
netem here, so no effect delays frames (docs/faults.md).

All of them live in the kernel, so the effects in force can always be read back
(`scan`) and undone even when the fault records are lost. Nothing here
touches a namespace outside the lab's plan.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from pyroute2 import IPRoute

from .. import netns
from ..congestion import qos
from ..plan import Node, Plan
from ..realize import pin_neighbours
from ..roce.headers import ROCE_UDP_PORT
from .model import Effect, EffectKind, FaultError

TABLE = "rocelab_fault"
CHAIN_PREFIX = "in_"
CHAINS = {EffectKind.DROP: CHAIN_PREFIX, EffectKind.LOSS: "loss_", EffectKind.CORRUPT: "corrupt_"}
PRIORITY = {EffectKind.DROP: -500, EffectKind.LOSS: -490, EffectKind.CORRUPT: -480}
IFF_UP = 0x1
TC_H_ROOT = 0xFFFFFFFF
NFT_TIMEOUT_S = 10.0
RATE_HANDLE = 0x1F0000  # the gray RATE effect's HTB root qdisc (1f:); its class is 1f:1
PKEY_BITS = 80  # the BTH partition key: bits 80-95 after the UDP header's start
MILLION = 1_000_000


def _by_node(effects: Iterable[Effect]) -> dict[str, list[Effect]]:
    groups: dict[str, list[Effect]] = defaultdict(list)
    for e in sorted(effects):
        groups[e.node].append(e)
    return groups


def _nft(node: Node, argv: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    if shutil.which("nft") is None:
        raise FaultError("silent faults need nftables: apt install nftables (or make setup)")
    with netns.entered(node.netns):
        return subprocess.run(["nft", *argv], input=stdin, capture_output=True, text=True,
                              timeout=NFT_TIMEOUT_S)


def _nft_script(node: Node, script: str) -> None:
    res = _nft(node, ["-f", "-"], script)
    if res.returncode != 0:
        raise FaultError(f"nft on {node.name} failed: {res.stderr.strip()}")


def _rule(e: Effect) -> str:
    if e.kind is EffectKind.DROP:
        return "counter drop"
    share = round(float(e.value) / 100 * MILLION)
    sample = f"numgen random mod {MILLION} < {share}"
    if e.kind is EffectKind.LOSS:
        return f'{sample} counter drop comment "{e.value}"'
    return (f'udp dport {ROCE_UDP_PORT} {sample} @th,{PKEY_BITS},16 set 0x0 counter '
            f'comment "{e.value}"')


def _ruleset(effects: list[Effect]) -> str:
    chains = "".join(
        f" chain {CHAINS[e.kind]}{e.port} {{\n"
        f"  type filter hook ingress device \"{e.port}\" priority {PRIORITY[e.kind]}; policy accept;\n"
        f"  {_rule(e)}\n }}\n" for e in effects)
    return f"table netdev {TABLE} {{\n{chains}}}\n"


def _set_rates(plan: Plan, node: Node, effects: list[Effect]) -> None:
    with netns.entered(node.netns), IPRoute() as ipr:
        for e in effects:
            index = _index(ipr, node, e.port)
            if plan.congestion:  # the port's own tree, class 1:1, runs at the gray rate
                port = node.interface(e.port)
                qos.set_port_rate(ipr, index, qos.of_port(plan.congestion, port.speed_bps),
                                  plan.port_mtu(port), int(e.value))
                continue
            if any(q["parent"] == TC_H_ROOT and q.get_attr("TCA_KIND") != "noqueue"
                   for q in ipr.get_qdiscs(index=index)):
                raise FaultError(f"rate: {node.name}:{e.port} already has a root qdisc "
                                 "(shaped by the lab, or by hand); nothing was changed")
            rate = f"{int(e.value)}bit"
            ipr.tc("add", "htb", index, RATE_HANDLE, default=1)
            ipr.tc("add-class", "htb", index, RATE_HANDLE | 1, parent=RATE_HANDLE, rate=rate,
                   ceil=rate)


def _clear_rates(plan: Plan, node: Node, ports: list[str]) -> None:
    with netns.entered(node.netns), IPRoute() as ipr:
        for name in ports:
            if plan.congestion:  # back to the port's own shaped rate
                port = node.interface(name)
                cp = qos.of_port(plan.congestion, port.speed_bps)
                qos.set_port_rate(ipr, _index(ipr, node, name), cp, plan.port_mtu(port),
                                  cp.rate_bps)
            else:
                ipr.tc("del", "htb", _index(ipr, node, name), RATE_HANDLE)


def _index(ipr: IPRoute, node: Node, port: str) -> int:
    index = ipr.link_lookup(ifname=port)
    if not index:
        raise FaultError(f"{node.name} has no port {port}")
    return int(index[0])


def _set_ports(plan: Plan, node: Node, ports: list[str], state: str) -> None:
    """Set ports up or down; a port set up gets its permanent neighbour entries back
    (the kernel flushed them when it went down)."""
    with netns.entered(node.netns), IPRoute() as ipr:
        for port in ports:
            ipr.link("set", index=_index(ipr, node, port), state=state)
        if state == "up":
            pin_neighbours(ipr, plan, node, ports)


def apply(plan: Plan, effects: Iterable[Effect]) -> None:
    """Put effects in force (idempotent: an effect already there stays as it is)."""
    def one(item: tuple[str, list[Effect]]) -> None:
        node = plan.node(item[0])
        chains = [e for e in item[1] if e.kind in CHAINS]
        if chains:
            _nft_script(node, _ruleset(chains))
        rates = [e for e in item[1] if e.kind is EffectKind.RATE]
        if rates:
            _set_rates(plan, node, rates)
        downs = [e.port for e in item[1] if e.kind is EffectKind.DOWN]
        if downs:
            _set_ports(plan, node, downs, "down")

    netns.parallel(one, _by_node(effects).items())


def undo(plan: Plan, effects: Iterable[Effect], present: set[Effect]) -> None:
    """Lift effects that are in force (`present`, from `scan`); others are ignored."""
    def one(item: tuple[str, list[Effect]]) -> None:
        node = plan.node(item[0])
        drops = [e for e in item[1] if e.kind in CHAINS]
        if drops:
            rest = {e for e in present if e.node == node.name and e.kind in CHAINS}
            _nft_script(node, f"delete table netdev {TABLE}\n" if rest <= set(drops) else "".join(
                f"flush chain netdev {TABLE} {CHAINS[e.kind]}{e.port}\n"
                f"delete chain netdev {TABLE} {CHAINS[e.kind]}{e.port}\n" for e in drops))
        rates = [e.port for e in item[1] if e.kind is EffectKind.RATE]
        if rates:
            _clear_rates(plan, node, rates)
        downs = [e.port for e in item[1] if e.kind is EffectKind.DOWN]
        if downs:
            _set_ports(plan, node, downs, "up")

    netns.parallel(one, _by_node(set(effects) & present).items())


def _drops_in(node: Node) -> dict[Effect, int]:
    """DROP effects in a node's namespace -> packets dropped so far."""
    if shutil.which("nft") is None:
        return {}
    res = _nft(node, ["-j", "list", "table", "netdev", TABLE])
    if res.returncode != 0:
        if "No such file or directory" in res.stderr:  # no table: no silent fault here
            return {}
        raise FaultError(f"nft on {node.name} failed: {res.stderr.strip()}")
    return parse_chains(node.name, json.loads(res.stdout).get("nftables", []))


def parse_chains(node: str, items: list[dict[str, Any]]) -> dict[Effect, int]:
    """`nft -j list table` items -> the chain effects they hold and their packet counters
    (a rule's comment carries a gray effect's share). Pure."""
    out: dict[Effect, int] = {}
    values: dict[str, str] = {}
    for item in items:
        rule = item.get("rule")
        if isinstance(rule, dict) and rule.get("comment"):
            values[str(rule["chain"])] = str(rule["comment"])
    for item in items:
        chain, rule = item.get("chain"), item.get("rule")
        name = str((chain or {}).get("name") or (rule or {}).get("chain") or "")
        kind = next((k for k, prefix in CHAINS.items() if name.startswith(prefix)), None)
        if kind is None:
            continue
        effect = Effect(kind, node, name[len(CHAINS[kind]):], values.get(name, ""))
        exprs = (rule or {}).get("expr", [])
        packets = sum(e["counter"]["packets"] for e in exprs if "counter" in e)
        out[effect] = out.get(effect, 0) + packets
    return out


def _ports_in(plan: Plan, node: Node) -> dict[Effect, int]:
    """The effects on the node's ports themselves, from one netlink session: DOWN (router
    ports administratively down) and RATE (the gray HTB root 1f:, at its class's rate; on
    a shaped lab, class 1:1 below the port's own rate)."""
    ports = {i.name for i in node.interfaces}
    out: dict[Effect, int] = {}
    with netns.entered(node.netns), IPRoute() as ipr:
        links = ipr.get_links()
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in links}
        if node.is_router:
            out.update({Effect(EffectKind.DOWN, node.name, names[link["index"]]): 0
                        for link in links
                        if names[link["index"]] in ports and not link["flags"] & IFF_UP})
        rates = _shaped_rates(plan, node, ipr, names) if plan.congestion else \
            _gray_roots(ipr, names, ports)
        out.update({Effect(EffectKind.RATE, node.name, port, str(bps)): 0
                    for port, bps in rates.items()})
    return out


def _gray_roots(ipr: IPRoute, names: dict[int, str], ports: set[str]) -> dict[str, int]:
    """Unshaped lab: port -> the rate of the gray HTB root 1f:'s class, where there is one."""
    out = {}
    for q in ipr.get_qdiscs():
        port = names.get(q["index"])
        if q["handle"] != RATE_HANDLE or q.get_attr("TCA_KIND") != "htb" or port not in ports:
            continue
        bps = qos.htb_class_rate(ipr, q["index"], RATE_HANDLE | 1)
        if bps is not None:
            out[port] = bps
    return out


def _shaped_rates(plan: Plan, node: Node, ipr: IPRoute, names: dict[int, str]) -> dict[str, int]:
    """Shaped lab: port -> class 1:1's rate, where it is below the port's own (the
    kernel keeps whole bytes per second)."""
    assert plan.congestion is not None
    index = {name: i for i, name in names.items()}
    out = {}
    for port in node.interfaces:
        have = qos.port_rate(ipr, index[port.name]) if port.name in index else None
        own = plan.congestion.rate_of(port.speed_bps)
        if have is not None and have < own - own % 8:
            out[port.name] = have
    return out


def scan(plan: Plan) -> dict[Effect, int]:
    """Every effect in force in the lab -> packets it dropped (0 for DOWN)."""
    def one(node: Node) -> dict[Effect, int]:
        if not netns.exists(node.netns):
            return {}
        return _drops_in(node) | _ports_in(plan, node)

    found: dict[Effect, int] = {}
    for part in netns.parallel(one, plan.nodes):
        found.update(part)
    return found
