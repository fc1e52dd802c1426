"""FRR per router: BGP sessions, prefixes received and ECMP width, from FRR's JSON.

fetch: per router, `show bgp ipv4 unicast summary json` from bgpd and
`show ip route bgp json` from zebra, over their vty sockets (vty.py), as
raw text; a daemon that does not answer is recorded as an error.
parse: sessions per port (unnumbered peers are named by interface, numbered
ones by address), and the width of the installed route to every host
prefix the router must learn (leaves: one next hop per spine).
"""

from __future__ import annotations

import json
from typing import Any

from ...converge import expected_width
from ...paths import node_run_dir
from ...plan import Node, Plan
from .. import vty
from ..model import Families, Family, Labels, Source
from ..model import Kind as MetricKind

NAME = "bgp"
G = MetricKind.GAUGE
SUMMARY = "show bgp ipv4 unicast summary json"
ROUTES = "show ip route bgp json"


class Collector(Source):
    name = NAME

    def applies(self) -> bool:
        return bool(self.plan.frr_nodes)

    def fetch(self) -> dict[str, dict[str, str]]:
        out = {}
        for node in self.plan.frr_nodes:
            d = node_run_dir(self.plan.lab, node.name)
            try:
                out[node.name] = {"summary": vty.command(d / "bgpd.vty", SUMMARY),
                                  "routes": vty.command(d / "zebra.vty", ROUTES)}
            except vty.VtyError as e:
                out[node.name] = {"error": str(e)}
        return out

    @staticmethod
    def parse(raw: dict[str, dict[str, str]], plan: Plan) -> list[Family]:
        fams = Families(plan.lab)
        for node in plan.frr_nodes:
            got = raw.get(node.name, {"error": "not fetched"})
            ok = "error" not in got
            labels = fams.labels(node=node.name)
            fams.add(G, "rocelab_bgp_daemon_up", "1 if bgpd and zebra answered.", int(ok), labels)
            fams.add(G, "rocelab_bgp_sessions_configured", "BGP sessions the topology defines.",
                     sum(1 for p in node.interfaces if p.fabric), labels)
            summary = json.loads(got["summary"] or "{}") if ok else {}
            _sessions(fams, plan, node, labels, summary.get("peers", {}))
            if ok:
                _ecmp(fams, plan, node, labels, json.loads(got["routes"] or "{}"))
        return fams.as_list()


def _port_of(plan: Plan, node: Node, peer: str) -> str | None:
    """The port a BGP peer is reached over: its name (unnumbered) or its address (numbered)."""
    for port in node.interfaces:
        if port.fabric and (port.name == peer or plan.peer_address(port) == peer):
            return port.name
    return None


def _sessions(fams: Families, plan: Plan, node: Node, labels: Labels,
              peers: dict[str, Any]) -> None:
    up = {p.name: (0, 0) for p in node.interfaces if p.fabric}
    for peer, info in peers.items():
        port = _port_of(plan, node, peer)
        if port is not None:
            up[port] = (int(info.get("state") == "Established"), int(info.get("pfxRcd") or 0))
    fams.add(G, "rocelab_bgp_sessions_established", "BGP sessions in state Established.",
             sum(u for u, _ in up.values()), labels)
    fams.add(G, "rocelab_bgp_prefixes_received", "Prefixes received over all sessions.",
             sum(n for _, n in up.values()), labels)
    for port, (established, prefixes) in sorted(up.items()):
        per_port = fams.labels(node=node.name, port=port)
        fams.add(G, "rocelab_bgp_session_up", "1 if the session over this port is Established.",
                 established, per_port)
        fams.add(G, "rocelab_bgp_session_prefixes_received", "Prefixes received over this port.",
                 prefixes, per_port)


def _ecmp(fams: Families, plan: Plan, node: Node, labels: Labels, routes: dict[str, Any]) -> None:
    want = plan.fib_prefixes(node)  # host /31s (l3) or VTEP loopbacks (evpn)
    widths = [_width(routes.get(p, [])) for p in want] or [0]
    for name, value, help_ in (
            ("ecmp_min_paths", min(widths), "Fewest installed next hops toward a host prefix."),
            ("ecmp_max_paths", max(widths), "Most installed next hops toward a host prefix."),
            ("ecmp_expected_paths", expected_width(plan, node), "Next hops a healthy fabric gives."),
            ("host_prefixes_missing", widths.count(0), "Host prefixes with no installed route.")):
        fams.add(G, f"rocelab_bgp_{name}", help_, value, labels)


def _width(entries: list[dict[str, Any]]) -> int:
    for entry in entries:
        if entry.get("selected") and entry.get("installed"):
            return sum(1 for nh in entry.get("nexthops", []) if nh.get("fib"))
    return 0
