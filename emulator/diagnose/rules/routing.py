"""Routing rules: BGP sessions down, ECMP narrower than planned, host prefixes missing,
FRR not answering, and silent links (carrier up, nothing arrives, BGP still holding)."""

from __future__ import annotations

from ..evidence import Evidence
from .common import Finding, Severity, directions, flow_links, item, names


def routing(ev: Evidence) -> list[Finding]:
    out = []
    for labels, up in sorted(ev.metric("rocelab_bgp_session_up").items()):
        d = dict(labels)
        if up == 0:
            peer = ev.peer(d["node"], d["port"])
            out.append(Finding(
                "routing", Severity.CRITICAL,
                f"BGP session {d['node']} -> {d['port']} is down",
                [item("bgp_session_up", 0, d["node"], d["port"]),
                 item("interface_up", ev.by_port("rocelab_interface_up").get(
                     f"{d['node']}:{d['port']}", 0), d["node"], d["port"])],
                {"flows": [], "hosts": []},
                f"check the link {d['node']}-{peer[0] if peer else d['port']} (carrier, "
                "addresses, BGP config) and `rocelab status`", 2.5,
                [d["node"], f"{d['node']}:{d['port']}"]))
    expected = ev.by_node("rocelab_bgp_ecmp_expected_paths")
    for node, got in sorted(ev.by_node("rocelab_bgp_ecmp_min_paths").items()):
        want = expected.get(node)
        if want and got < want:
            out.append(Finding("routing", Severity.WARNING,
                               f"{node} has {int(got)} ECMP next hop(s) toward some host "
                               f"prefix, the plan gives {int(want)}",
                               [item("bgp_ecmp_min_paths", got, node),
                                item("bgp_ecmp_expected_paths", want, node)],
                               {"flows": [], "hosts": []},
                               f"find {node}'s missing paths: a session down, a link failed, "
                               "maximum-paths too low", 2.3, [node]))
    for node, n in sorted(ev.by_node("rocelab_bgp_host_prefixes_missing").items()):
        if n > 0:
            out.append(Finding("routing", Severity.CRITICAL,
                               f"{node} has no route to {int(n)} host prefix(es)",
                               [item("bgp_host_prefixes_missing", n, node)],
                               {"flows": [], "hosts": []},
                               f"check the sessions of {node} and the origin leaves' "
                               "redistribution", 2.6, [node]))
    for node, up in sorted(ev.by_node("rocelab_bgp_daemon_up").items()):
        if up == 0:
            out.append(Finding("routing", Severity.CRITICAL, f"FRR on {node} does not answer",
                               [item("bgp_daemon_up", 0, node)], {"flows": [], "hosts": []},
                               f"look at {node}'s bgpd/zebra logs in the run directory",
                               2.7, [node]))
    return out


def silent_links(ev: Evidence) -> list[Finding]:
    """Routing findings too: links that carry nothing one way while carrier is up."""
    tx = ev.by_port("rocelab_interface_tx_packets_total")
    rx = ev.by_port("rocelab_interface_rx_packets_total")
    up = ev.by_port("rocelab_interface_up")
    sessions = {f"{dict(lb)['node']}:{dict(lb)['port']}": v
                for lb, v in ev.metric("rocelab_bgp_session_up").items()}
    out = []
    for a, ap, b, bp in directions(ev):
        sent, got = tx.get(f"{a}:{ap}"), rx.get(f"{b}:{bp}")
        if sent is None or got is None or sent < 20 or got > 0:
            continue
        if not (up.get(f"{a}:{ap}", 1) and up.get(f"{b}:{bp}", 1)):
            continue
        still = sessions.get(f"{a}:{ap}")
        cause = (f"link {a}-{b} is silent: {a} sent {int(sent)} packets to {b}, {b} "
                 f"received none, yet carrier is up"
                 + (" and BGP still holds the session (no BFD): traffic is black-holed"
                    if still else ""))
        out.append(Finding("routing", Severity.CRITICAL, cause,
                           [item("tx_packets", sent, a, ap), item("rx_packets", 0, b, bp),
                            item("bgp_session_up", still if still is not None else -1, a, ap)],
                           {"flows": names(f for f in ev.flows if frozenset((a, b))
                                            in flow_links(ev, f)), "hosts": []},
                           f"enable BFD on {a}-{b} so the fabric routes around a silent "
                           "link in milliseconds; replace the link", 2.4,
                           [a, b, f"{a}:{ap}", f"{b}:{bp}"]))
    return out
