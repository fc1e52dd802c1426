"""What FRR's EVPN knows on a leaf (fabric evpn), read through vtysh JSON.

zebra owns the VNI and its remote VTEPs (the flood list built from type-3
routes: head-end replication sends every broadcast, unknown-unicast and
multicast frame once to each); bgpd owns the routes themselves: type-2
(MAC/IP) and type-3 (inclusive multicast, one per VTEP and VNI).
"""

from __future__ import annotations

from typing import Any

from .errors import RocelabError
from .frr import vtysh_json
from .plan import Kind, Node, Plan


def vni_state(plan: Plan, node: Node) -> dict[str, Any]:
    """{vni, remote_vteps (sorted IPs), macs} of the leaf's L2VNI."""
    assert plan.l2 is not None
    data = vtysh_json(plan.lab, node.name, f"show evpn vni {plan.l2.vni} json", daemon="zebra")
    if not isinstance(data, dict) or "vni" not in data:
        raise RocelabError(f"VNI {plan.l2.vni} not known to zebra yet")
    # FRR 8.4 lists the remote VTEPs' IPs under "numRemoteVteps"; later releases under
    # "remoteVteps" (objects with "ip") and keep "numRemoteVteps" a count.
    vteps = data.get("remoteVteps") or data.get("numRemoteVteps") or []
    vteps = vteps if isinstance(vteps, list) else []
    ips = sorted(v.get("ip", "?") if isinstance(v, dict) else str(v) for v in vteps)
    return {"vni": plan.l2.vni, "vtep": data.get("vtepIp"), "remote_vteps": ips,
            "macs": int(data.get("numMacs", 0) or 0)}


def expected_vteps(plan: Plan, node: Node, failed: set[str] | frozenset[str] = frozenset()
                   ) -> list[str]:
    """The remote VTEPs (sorted loopbacks) a leaf floods to: every other leaf not failed."""
    return sorted(str(n.loopback) for n in plan.of_kind(Kind.LEAF)
                  if n is not node and n.name not in failed)


def route_counts(plan: Plan, node: Node) -> dict[str, int]:
    """Type-2 and type-3 routes in the node's BGP EVPN table (every RD)."""
    data = vtysh_json(plan.lab, node.name, "show bgp l2vpn evpn route json", daemon="bgpd")
    counts = {"type2": 0, "type3": 0}
    for rd in (data or {}).values():
        if not isinstance(rd, dict):
            continue
        for prefix in rd:
            if prefix.startswith("[2]"):
                counts["type2"] += 1
            elif prefix.startswith("[3]"):
                counts["type3"] += 1
    return counts
