"""Trimming hotspot: where switches trimmed packets (docs/congestion.md "Packet trimming"),
at the last hop (a leaf port facing a host: incast into that host) or in the fabric
(leaf uplinks, spine downlinks: flows colliding on a path), naming the ports."""

from __future__ import annotations

from ...metrics.snapshot import PortSample
from ..evidence import Evidence
from .common import Finding, Severity, active, affected, flow_hops, item

MIN_TRIMS = 50  # packets a port must have trimmed in the window to be a hotspot
MIN_SHARE = 0.01  # ... and at least this share of what its class sent (a burst's odd trim is
# the mechanism working, not a hotspot)
SHOWN = 6  # ports named in the cause


def trimming_hotspot(ev: Evidence) -> list[Finding]:
    hot = [p for p in ev.ports if ev.kind(p["node"]) != "host" and _hot(p)]
    if not hot:
        return []
    hot.sort(key=lambda p: (-p["trim"], p["node"], p["port"]))
    last = [p for p in hot if _last_hop(ev, p)]
    fabric = [p for p in hot if not _last_hop(ev, p)]
    total = sum(p["trim"] for p in hot)
    dropped = sum(p["dropped_trim"] for p in hot)
    hops = {f"{p['node']}:{p['port']}" for p in hot}
    hurt = [f for f in active(ev.flows, 0.0, ev.window_s) if flow_hops(ev, f) & hops]
    evidence = [item("trimmed_packets", p["trim"], p["node"], p["port"], p["tc"],
                     where="last hop" if _last_hop(ev, p) else "fabric",
                     tx_trim=p["tx_trim"], dropped_trim=p["dropped_trim"],
                     share=round(_share(p), 4), max_queued=p["max_queued"])
                for p in hot]
    return [Finding("trimming-hotspot", Severity.CRITICAL if dropped else Severity.WARNING,
                    _cause(ev, last, fabric, total, dropped), evidence, affected(hurt),
                    _fix(last, fabric), 0.5,
                    [f"{p['node']}:{p['port']}" for p in hot])]


def _hot(p: PortSample) -> bool:
    return p["trim"] >= MIN_TRIMS and _share(p) >= MIN_SHARE


def _share(p: PortSample) -> float:
    """Trimmed packets over the packets the class offered the port (trimmed + sent whole)."""
    offered = p["trim"] + p["tx_packets"]
    return p["trim"] / offered if offered else 0.0


def _last_hop(ev: Evidence, p: PortSample) -> bool:
    peer = ev.peer(p["node"], p["port"])
    return peer is not None and ev.kind(peer[0]) == "host"


def _ports(ports: list[PortSample]) -> str:
    names = [f"{p['node']}:{p['port']} ({p['trim']}, {_share(p):.0%})" for p in ports[:SHOWN]]
    more = len(ports) - SHOWN
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _cause(ev: Evidence, last: list[PortSample], fabric: list[PortSample], total: int,
           dropped: int) -> str:
    n_last = sum(p["trim"] for p in last)
    parts = []
    if last:
        hosts = sorted({peer[0] for p in last if (peer := ev.peer(p["node"], p["port"]))})
        parts.append(f"{n_last} ({n_last / total:.0%}) at the last hop, into "
                     f"{', '.join(hosts)}: {_ports(last)}")
    if fabric:
        n = total - n_last
        parts.append(f"{n} ({n / total:.0%}) in the fabric: {_ports(fabric)}")
    cause = f"switches trimmed {total} packets: " + "; ".join(parts)
    if dropped:
        cause += f"; {dropped} trimmed packets were dropped (the priority class was full)"
    return cause


def _fix(last: list[PortSample], fabric: list[PortSample]) -> str:
    out = []
    if last:
        out.append("last-hop trims are incast: fewer senders per receiver at once, or a "
                   "sender window (NSCC) that backs off on the TRIM NACKs")
    if fabric:
        out.append("fabric trims are collisions on a path: spread the load over more "
                   "entropy values (MRC --evs) or spines, or check a degraded link there")
    return "; ".join(out)
