"""Export a lab for tools beyond one machine: a containerlab topology (pure, plus `write`).

`rocelab export --format containerlab` turns a Plan and its render into what
containerlab deploys, and clabernetes spreads over a Kubernetes cluster:
`<lab>.clab.yml` plus, per node, the files its container binds:

- a router: `configs/<router>/frr.conf` (the integrated config, interface
  addresses included) and `configs/<router>/daemons` (FRR's daemons file:
  bgpd, and bfdd and staticd when the router needs them) in /etc/frr/ of an
  FRR image; the lab's sysctls as the node's `sysctls:`;
- a bridging switch (an l2 fabric's switches, an evpn fabric's leaves):
  `configs/<switch>/bridge.sh`, br0 with its STP settings, its ports and the
  VXLAN device, as `ip` commands run by the node's `exec:`;
- a host: `configs/<host>/host.sh` (its addresses and routes) run by `exec:`,
  in a container with `network-mode: none`, so its NICs keep the names the
  lab gives them (eth0, eth1, ...; containerlab otherwise keeps eth0 for its
  management network).

Every link is `endpoints: ["a:ifname", "b:ifname"]` with the interface names the
configs use, and its MTU. What does not carry over (the congestion plane, the
RoCE engine, rocelab's own tooling) is in docs/scale.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import outfile, render
from .errors import RocelabError
from .plan import Kind, Link, Node, Plan
from .spec import EcmpHash, FabricMode

FORMATS = ("containerlab",)
ROUTER_IMAGE = "quay.io/frrouting/frr:8.4.1"  # the 8.4 series rocelab runs (Debian 12: 8.4.4)
HOST_IMAGE = "ghcr.io/srl-labs/network-multitool"  # Alpine with iproute2 (multipath, bridge, vxlan)
MARKER = "# rocelab export"  # the first line of every clab file `export` writes
CONFIGS = "configs"
MOUNT = "/rocelab"  # where hosts and bridging switches find their script
BIND_TARGETS = {"frr.conf": "/etc/frr/frr.conf", "daemons": "/etc/frr/daemons",  # in the container
                "host.sh": f"{MOUNT}/host.sh", "bridge.sh": f"{MOUNT}/bridge.sh"}
NODE_FILES = frozenset({"frr.conf", "daemons", "host.sh", "bridge.sh"})  # all `export` writes per node
USER_HZ = 100  # bridge timers cross netlink (and iproute2's arguments) in centiseconds
VXLAN_PORT = 4789


@dataclass(frozen=True)
class Export:
    """What `write` puts in a directory: {relative path: text}, the clab file first."""

    lab: str
    clab_file: str  # "<lab>.clab.yml"
    files: dict[str, str]
    executable: frozenset[str]  # the scripts (mode 0755)


# -- sysctls: what realize writes in each namespace, as containerlab's `sysctls:` ---------

def sysctls(plan: Plan, node: Node) -> dict[str, str]:
    """The lab's sysctls that matter in a container: forwarding, dropping a next hop whose
    link lost carrier, and the multipath hash (realize.py sets the same in each namespace)."""
    out = {"net.ipv4.conf.all.rp_filter": "0", "net.ipv4.conf.default.rp_filter": "0",
           "net.ipv6.conf.all.accept_dad": "0", "net.ipv6.conf.default.accept_dad": "0"}
    policy = "1" if node.ecmp_hash is EcmpHash.L4 else "0"
    hashing = {"net.ipv4.fib_multipath_hash_policy": policy,
               "net.ipv6.fib_multipath_hash_policy": policy}
    linkdown = {"net.ipv4.conf.all.ignore_routes_with_linkdown": "1",
                "net.ipv4.conf.default.ignore_routes_with_linkdown": "1"}
    if node.is_router and plan.routed:
        out |= {"net.ipv4.ip_forward": "1", "net.ipv6.conf.all.forwarding": "1"} | linkdown | hashing
    elif node.kind is Kind.HOST and len(node.interfaces) > 1:
        out |= linkdown | hashing
    return out


# -- per-node files -------------------------------------------------------------

def daemons_file(plan: Plan, node: Node) -> str:
    """FRR's /etc/frr/daemons: the daemons this router runs (as `up` starts them) and no other."""
    run = set(render.daemons_for(plan, node))
    lines = [f"# {node.name} (lab {plan.lab}) -- rendered by rocelab export: FRR's daemons file",
             "# zebra always runs; the others as rocelab starts them for this router"]
    for daemon in ("bgpd", "ospfd", "ospf6d", "ripd", "ripngd", "isisd", "pimd", "ldpd", "nhrpd",
                   "eigrpd", "babeld", "sharpd", "pbrd", "bfdd", "fabricd", "vrrpd", "pathd",
                   "staticd"):
        lines.append(f"{daemon}={'yes' if daemon in run else 'no'}")
    lines += ["", "vtysh_enable=yes", 'zebra_options="  -A 127.0.0.1 -s 90000000"']
    lines += [f'{d}_options="  -A 127.0.0.1"' for d in render.daemons_for(plan, node) if d != "zebra"]
    return "\n".join(lines) + "\n"


def bridge_script(plan: Plan, node: Node) -> str:
    """A bridging switch's br0 as `ip` commands: what bridge.py makes through netlink (STP
    timers and priority, the fixed bridge MAC, the MAC limit, ports; on an evpn leaf the
    VXLAN device, learning off, `tos inherit`)."""
    l2 = plan.l2
    assert l2 is not None and node.bridge is not None
    br = node.bridge
    stp = plan.fabric is FabricMode.L2 and l2.stp
    lines = ["#!/bin/sh", f"# {node.name} (lab {plan.lab}) -- rendered by rocelab export: its bridge "
             f"{br}, its ports" + (" and VXLAN device" if plan.fabric is FabricMode.EVPN else ""),
             "set -e"]
    if plan.fabric is FabricMode.L2:  # no IP on an l2 switch: no IPv6 chatter in the MAC tables
        lines.append("sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
    lines.append(f"ip link add {br} address {node.bridge_mac} type bridge stp_state {int(stp)} "
                 f"priority {node.stp_priority or 32768} forward_delay {l2.forward_delay_s * USER_HZ} "
                 f"hello_time {l2.hello_time_s * USER_HZ} max_age {l2.max_age_s * USER_HZ} "
                 f"ageing_time {l2.ageing_time_s * USER_HZ} mcast_snooping 0")
    if l2.mac_table_limit:
        lines.append(f"ip link set dev {br} type bridge fdb_max_learned {l2.mac_table_limit}"
                     "  # Linux and iproute2 6.7+")
    for p in node.interfaces:
        if p.bridged:
            lines.append(f"ip link set dev {p.name} master {br}")
    if plan.fabric is FabricMode.EVPN:
        vx = l2.vxlan
        mtu = next(p.mtu for p in node.interfaces if p.bridged)
        lines += [f"ip link add {vx} mtu {mtu} type vxlan id {l2.vni} local {node.loopback} "
                  f"dstport {VXLAN_PORT} nolearning tos inherit ttl 64",
                  f"ip link set dev {vx} master {br}",
                  f"ip link set dev {vx} type bridge_slave learning off",
                  f"ip link set dev {vx} up",
                  f"sysctl -qw net.ipv6.conf.{br}.disable_ipv6=1",
                  f"sysctl -qw net.ipv6.conf.{vx}.disable_ipv6=1"]
    lines.append(f"ip link set dev {br} up")
    return "\n".join(lines) + "\n"


# -- the containerlab topology ----------------------------------------------------

class _Flow(list[str]):
    """A list YAML prints inline: endpoints: ["leaf1:spine1", "spine1:leaf1"]."""


class _Dumper(yaml.SafeDumper):
    pass


def _flow(dumper: yaml.SafeDumper, items: _Flow) -> yaml.Node:
    return yaml.SequenceNode("tag:yaml.org,2002:seq", [
        yaml.ScalarNode("tag:yaml.org,2002:str", item, style='"') for item in items], flow_style=True)


_Dumper.add_representer(_Flow, _flow)


def containerlab(plan: Plan, rendered: render.Rendered, router_image: str = ROUTER_IMAGE,
                 host_image: str = HOST_IMAGE) -> Export:
    """The lab as a containerlab topology and the files its nodes bind (a router's frr.conf:
    the rendered one, or its `frr_configs:` file with any snippet, as render made it)."""
    files: dict[str, str] = {}
    nodes: dict[str, dict[str, Any]] = {}
    link_mtu = {link: plan.port_mtu(plan.node(link.a).interface(link.a_ifname))
                for link in plan.links}
    own_mtu = _own_mtus(plan, link_mtu)
    frr = {n.name for n in plan.frr_nodes}
    for node in plan.nodes:
        mine = _node_files(plan, rendered, node, frr)
        image = router_image if node.name in frr else host_image
        nodes[node.name] = _clab_node(plan, node, image, mine, own_mtu.get(node.name, []))
        files |= {f"{CONFIGS}/{node.name}/{name}": text for name, text in mine.items()}
    links = [{"endpoints": _Flow([f"{link.a}:{link.a_ifname}", f"{link.b}:{link.b_ifname}"]),
              "mtu": mtu} for link, mtu in link_mtu.items()]
    clab = {"name": plan.lab, "topology": {"nodes": nodes, "links": links}}
    source = Path(plan.source).name if plan.source and not plan.source.startswith("<") else plan.source
    head = [f"{MARKER} of lab {plan.lab} ({source}): {plan.shape()}, fabric {plan.fabric.value}",
            f"# deploy:   sudo containerlab deploy -t {plan.lab}.clab.yml",
            "# clabernetes (here): clabverter --stdout --naming non-prefixed | kubectl apply -f -",
            "# Carries over: topology, addresses, BGP/BFD/EVPN configs, host routes. Not: the",
            "# congestion plane, the RoCE engine, rocelab's tooling (docs/scale.md)."]
    clab_file = f"{plan.lab}.clab.yml"
    text = "\n".join(head) + "\n" + yaml.dump(clab, Dumper=_Dumper, sort_keys=False,
                                               default_flow_style=False, width=110)
    return Export(lab=plan.lab, clab_file=clab_file, files={clab_file: text, **files},
                  executable=frozenset(f for f in files if f.endswith(".sh")))


def _own_mtus(plan: Plan, link_mtu: dict[Link, int]) -> dict[str, list[tuple[str, int]]]:
    """node -> (port, MTU) of each port whose MTU differs from its link's."""
    own_mtu: dict[str, list[tuple[str, int]]] = {}
    for link, mtu in link_mtu.items():
        for name, ifname in ((link.a, link.a_ifname), (link.b, link.b_ifname)):
            port = plan.node(name).interface(ifname)
            if plan.port_mtu(port) != mtu:
                own_mtu.setdefault(name, []).append((ifname, plan.port_mtu(port)))
    return own_mtu


def _node_files(plan: Plan, rendered: render.Rendered, node: Node, frr: set[str]) -> dict[str, str]:
    """The files a node's container binds, by name: an FRR router's frr.conf and daemons,
    a host's host.sh, a bridging switch's bridge.sh."""
    out = {}
    if node.name in frr:
        out["frr.conf"] = rendered.files[node.name]["frr.conf"]
        out["daemons"] = daemons_file(plan, node)
    elif not node.is_router:
        out["host.sh"] = render.host_script(plan, node)
    if node.bridge:
        out["bridge.sh"] = bridge_script(plan, node)
    return out


def _clab_node(plan: Plan, node: Node, image: str, mine: dict[str, str],
               own_mtu: list[tuple[str, int]]) -> dict[str, Any]:
    """A node's entry: its image, binds, the scripts it runs and its sysctls."""
    entry: dict[str, Any] = {"kind": "linux", "group": node.kind.value, "image": image}
    if node.kind is Kind.HOST:
        entry["network-mode"] = "none"
    if mine:
        entry["binds"] = [f"{CONFIGS}/{node.name}/{name}:{BIND_TARGETS[name]}" for name in mine]
    run = [f"sh {MOUNT}/{name}" for name in mine if name.endswith(".sh")]
    if node.kind is not Kind.HOST:  # hosts' host.sh sets every NIC's MTU itself
        run += [f"ip link set dev {ifname} mtu {mtu}" for ifname, mtu in own_mtu]
    if run:
        entry["exec"] = run
    entry["sysctls"] = sysctls(plan, node)
    return entry


def left_behind(plan: Plan) -> list[str]:
    """What of this topology the export cannot carry (docs/scale.md), for the user to see."""
    out = []
    if plan.congestion:
        out.append(f"the congestion plane (shaping at speed / {float(plan.dilation):g}, ECN, PFC, "
                   "DCQCN): containers run unshaped")
    return out


# -- writing ------------------------------------------------------------------------

def _refuse(out: Path, why: str) -> RocelabError:
    return RocelabError(f"{out}: {why}; export into a new or empty directory, or over an earlier "
                        "rocelab export (nothing was changed)")


def _read_clab(out: Path, clab_file: Path) -> tuple[set[str], str]:
    """The node names and the lab name of an earlier export's clab file."""
    try:
        data = yaml.safe_load(clab_file.read_text())
        return set(data["topology"]["nodes"]), str(data["name"])
    except (yaml.YAMLError, KeyError, TypeError):
        raise _refuse(out, f"its {clab_file.name} is not a containerlab topology") from None


def earlier_export(out: Path) -> list[Path]:
    """The files an earlier `rocelab export` left in `out` (its clab file first); [] if empty.

    An earlier export is recognised by its clab file (`<lab>.clab.yml` starting with
    MARKER) and owns only that file and configs/<node>/{frr.conf, daemons, host.sh,
    bridge.sh} for the nodes it names. containerlab's own lab directory beside it
    (`clab-<lab>/`, made by `containerlab deploy`) is left alone. Anything else in `out`
    is someone else's: RocelabError naming it, and nothing is touched.
    """
    if out.exists() and not out.is_dir():
        raise _refuse(out, "is not a directory")
    if not out.exists() or not any(out.iterdir()):
        return []
    ours = [f for f in sorted(out.glob("*.clab.yml")) if f.is_file() and not f.is_symlink()
            and _starts_with_marker(f)]
    if len(ours) != 1:
        first = sorted(e.name for e in out.iterdir())[0]
        raise _refuse(out, f"not empty ({first}) and not a rocelab export (no <lab>.clab.yml "
                      "written by rocelab)" if not ours else "holds more than one rocelab clab file")
    clab_file = ours[0]
    nodes, lab = _read_clab(out, clab_file)
    owned, foreign = [clab_file], []
    for entry in sorted(out.iterdir()):
        if entry == clab_file or (entry.name == f"clab-{lab}" and entry.is_dir()
                                  and not entry.is_symlink()):
            continue
        if entry.name != CONFIGS or entry.is_symlink() or not entry.is_dir():
            foreign.append(entry)
            continue
        mine, others = render.node_files(sorted(entry.iterdir()), nodes, NODE_FILES)
        owned += mine
        foreign += others
    if foreign:
        raise _refuse(out, f"holds {foreign[0].relative_to(out)}, which no rocelab export wrote")
    return owned


def _starts_with_marker(path: Path) -> bool:
    try:
        with path.open() as f:
            return f.readline().startswith(MARKER)
    except (OSError, UnicodeDecodeError):
        return False


def write(export: Export, out: Path) -> list[Path]:
    """Write an export into `out`, which then holds exactly it (and containerlab's own lab
    directory, if one was there): a new or empty directory is filled, an earlier rocelab
    export is replaced, and a directory holding anything else is refused untouched."""
    old = earlier_export(out)
    for f in old:
        f.unlink()
    for d in sorted({f.parent for f in old} - {out}, reverse=True):
        d.rmdir()  # empty: earlier_export refused anything it did not own
    if (out / CONFIGS).is_dir():
        (out / CONFIGS).rmdir()
    outfile.make_dir(out)
    written = []
    for rel, text in export.files.items():
        target = out / rel
        outfile.make_dir(target.parent)
        outfile.write_text(target, text)
        if rel in export.executable:
            target.chmod(0o755)
        written.append(target)
    return written
