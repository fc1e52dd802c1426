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

Both live in the kernel, so the effects in force can always be read back
(`scan`) and undone even when the fault records are lost. Nothing here
touches a namespace outside the lab's plan.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Iterable

from pyroute2 import IPRoute

from .. import netns
from ..plan import Node, Plan
from ..realize import pin_neighbours
from .model import Effect, EffectKind, FaultError

TABLE = "rocelab_fault"
CHAIN_PREFIX = "in_"
IFF_UP = 0x1
NFT_TIMEOUT_S = 10.0


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


def _drop_ruleset(ports: list[str]) -> str:
    chains = "".join(
        f" chain {CHAIN_PREFIX}{p} {{\n"
        f"  type filter hook ingress device \"{p}\" priority -500; policy accept;\n"
        f"  counter drop\n }}\n" for p in ports)
    return f"table netdev {TABLE} {{\n{chains}}}\n"


def _set_ports(plan: Plan, node: Node, ports: list[str], state: str) -> None:
    """Set ports up or down; a port set up gets its permanent neighbour entries back
    (the kernel flushed them when it went down)."""
    with netns.entered(node.netns), IPRoute() as ipr:
        for port in ports:
            index = ipr.link_lookup(ifname=port)
            if not index:
                raise FaultError(f"{node.name} has no port {port}")
            ipr.link("set", index=index[0], state=state)
        if state == "up":
            pin_neighbours(ipr, plan, node, ports)


def apply(plan: Plan, effects: Iterable[Effect]) -> None:
    """Put effects in force (idempotent: an effect already there stays as it is)."""
    def one(item: tuple[str, list[Effect]]) -> None:
        node = plan.node(item[0])
        drops = [e.port for e in item[1] if e.kind is EffectKind.DROP]
        if drops:
            _nft_script(node, _drop_ruleset(drops))
        downs = [e.port for e in item[1] if e.kind is EffectKind.DOWN]
        if downs:
            _set_ports(plan, node, downs, "down")

    netns.parallel(one, _by_node(effects).items())


def undo(plan: Plan, effects: Iterable[Effect], present: set[Effect]) -> None:
    """Lift effects that are in force (`present`, from `scan`); others are ignored."""
    def one(item: tuple[str, list[Effect]]) -> None:
        node = plan.node(item[0])
        drops = [e for e in item[1] if e.kind is EffectKind.DROP]
        if drops:
            rest = {e for e in present if e.node == node.name and e.kind is EffectKind.DROP}
            _nft_script(node, f"delete table netdev {TABLE}\n" if rest <= set(drops) else "".join(
                f"flush chain netdev {TABLE} {CHAIN_PREFIX}{e.port}\n"
                f"delete chain netdev {TABLE} {CHAIN_PREFIX}{e.port}\n" for e in drops))
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
    out: dict[Effect, int] = {}
    for item in json.loads(res.stdout).get("nftables", []):
        chain = item.get("chain") or {}
        rule = item.get("rule") or {}
        name = chain.get("name") or rule.get("chain") or ""
        if not name.startswith(CHAIN_PREFIX):
            continue
        effect = Effect(EffectKind.DROP, node.name, name[len(CHAIN_PREFIX):])
        packets = sum(e["counter"]["packets"] for e in rule.get("expr", []) if "counter" in e)
        out[effect] = out.get(effect, 0) + packets
    return out


def _downs_in(node: Node) -> dict[Effect, int]:
    """DOWN effects: router ports of the plan that are administratively down."""
    ports = {i.name for i in node.interfaces}
    with netns.entered(node.netns), IPRoute() as ipr:
        links = ipr.get_links()
    return {Effect(EffectKind.DOWN, node.name, link.get_attr("IFLA_IFNAME")): 0
            for link in links
            if link.get_attr("IFLA_IFNAME") in ports and not link["flags"] & IFF_UP}


def scan(plan: Plan) -> dict[Effect, int]:
    """Every effect in force in the lab -> packets it dropped (0 for DOWN)."""
    def one(node: Node) -> dict[Effect, int]:
        if not netns.exists(node.netns):
            return {}
        return _drops_in(node) | (_downs_in(node) if node.is_router else {})

    found: dict[Effect, int] = {}
    for part in netns.parallel(one, plan.nodes):
        found.update(part)  # type: ignore[arg-type]
    return found
