"""Semantic checks of a topology the schema cannot express, before anything is planned:
timers, tiers, pools that overlap, what a bridged fabric (l2, evpn) cannot build."""

from __future__ import annotations

import ipaddress

from ..errors import SpecError
from ..spec import Addressing, FabricMode, Links, Topology
from .nodes import VXLAN_OVERHEAD
from .skeleton import links_spec


def check_topology(topo: Topology, source: str) -> None:
    """SpecError naming the first field that cannot be planned as written."""
    if topo.bgp.hold < 3 * topo.bgp.keepalive:
        raise SpecError(source, "bgp.hold", f"must be at least 3 x bgp.keepalive "
                        f"({3 * topo.bgp.keepalive}) (got {topo.bgp.hold})")
    if (topo.pods is None) != (topo.superspines == 0):
        raise SpecError(source, "superspines" if topo.pods else "pods",
                        "a 3-tier Clos needs both pods and superspines (at least 1 each)")
    if topo.nodes is None and not isinstance(topo.links, Links):
        raise SpecError(source, "links", "a list of links needs nodes: (an explicit fabric); "
                        "otherwise links: is a mapping (speed, mtu, host, leaf_spine, ...)")
    if topo.nodes is not None and isinstance(topo.links, Links):
        raise SpecError(source, "links", "with nodes: (an explicit fabric), links: is the list "
                        "of links, e.g. [{endpoints: [leaf1, spine1]}]")
    _check_homing(topo, source)
    if topo.fabric is not FabricMode.L3:
        _check_bridged(topo, source)
    nets = {k: ipaddress.IPv4Network(v) for k, v in topo.pools.model_dump().items()}
    if topo.addressing is Addressing.UNNUMBERED:
        nets.pop("fabric")
    for a, na in nets.items():
        for b, nb in nets.items():
            if a < b and na.overlaps(nb):
                raise SpecError(source, f"pools.{b}", f"{nb} overlaps pools.{a} ({na})")


def _check_homing(topo: Topology, source: str) -> None:
    """Rails, dual homing and planes: at most one way of giving a host several NICs."""
    h = topo.hosts
    if h.rails > 1 and h.dual_homed:
        raise SpecError(source, "hosts.dual_homed", "a host is either rail-optimized "
                        f"(rails {h.rails}) or dual-homed, not both")
    if topo.planes > 1:
        _check_planes(topo, source)


def _check_planes(topo: Topology, source: str) -> None:
    """planes > 1: a 2-tier routed Clos per plane, one NIC per plane on every host."""
    h = topo.hosts
    other = {"fabric": topo.fabric is not FabricMode.L3, "pods": topo.pods is not None,
             "nodes": topo.nodes is not None, "hosts.rails": h.rails > 1,
             "hosts.dual_homed": h.dual_homed}
    for where, used in other.items():
        if used:
            raise SpecError(source, where, f"not with planes {topo.planes}: each plane is a "
                            "2-tier l3 Clos and every host has one NIC per plane")


def _check_bridged(topo: Topology, source: str) -> None:
    mode = topo.fabric.value
    if topo.bgp.aggregate_hosts:
        raise SpecError(source, "bgp.aggregate_hosts", f"only fabric l3 routes host "
                        f"prefixes (fabric {mode} stretches one segment)")
    two_tier = {"pods": topo.pods is not None, "nodes": topo.nodes is not None,
                "hosts.rails": topo.hosts.rails > 1, "hosts.dual_homed": topo.hosts.dual_homed,
                "links.parallel": isinstance(topo.links, Links) and topo.links.parallel > 1}
    for where, used in two_tier.items():
        if used:
            raise SpecError(source, where, f"fabric {mode} builds a 2-tier Clos of single-homed "
                            "hosts on one link per leaf-spine pair; use fabric l3")
    switches = {f"spine{i}" for i in range(1, topo.spines + 1)} | \
        {f"leaf{i}" for i in range(1, topo.leaves + 1)}
    if topo.fabric is FabricMode.L2:
        if topo.l2.root not in switches:
            raise SpecError(source, "l2.root", f"no such switch; switches are spine1..spine"
                            f"{topo.spines}, leaf1..leaf{topo.leaves}")
        if topo.addressing is Addressing.NUMBERED:
            raise SpecError(source, "addressing", "fabric l2 has no routed links to number; "
                            "use unnumbered (the default) or fabric l3/evpn")
        if topo.bfd.enabled:
            raise SpecError(source, "bfd.enabled", "fabric l2 runs no BGP for BFD to guard; "
                            "set it false or use fabric l3/evpn")
        if topo.asn.overrides:
            raise SpecError(source, "asn.overrides", "fabric l2 runs no BGP")
        if not topo.l2.stp and topo.spines > 1 and not topo.congestion.enabled:
            raise SpecError(source, "l2.stp", f"false with {topo.spines} spines is a loop: a "
                            "broadcast storm from the first frame, as fast as the CPUs go; "
                            "shape every port (congestion: enabled: true) or keep STP on")
    mtu = links_spec(topo).mtu
    if topo.fabric is FabricMode.EVPN and mtu + VXLAN_OVERHEAD > 65535:
        raise SpecError(source, "links.mtu", f"fabric {mode} carries hosts' frames in VXLAN "
                        f"({VXLAN_OVERHEAD} bytes more): at most {65535 - VXLAN_OVERHEAD}")

