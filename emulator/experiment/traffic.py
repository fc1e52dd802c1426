"""What every port of a fabric carried during a run, from the kernel's own link counters (pure).

The runner snapshots every port of the plan (`plan.nodes[*].interfaces`) at the start and
the end of a run, and samples the switches' ports in between (counters.py); everything
here is a function of those recordings and the plan, for results.json's `traffic`:

    ports        every port's tx/rx bytes and packets during the run
    links        each link's bytes and packets, both directions, and what each end sent
    spine_bytes  bytes each spine sent (every port of it): how the fabric spread the load
    rail_bytes   rail-optimized hosts: bytes every host NIC on rail k sent, per rail
    bystanders   hosts that are neither the source nor the destination of any flow, and
                 what they received (flooding on a bridged fabric lands here)
    series       switch ports that sent at least ACTIVE_BYTES: cumulative tx bytes over time

The counters count everything a port carried, control traffic too (BGP keepalives, STP
BPDUs, ARP), as a switch's own port counters would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

from ..plan import Kind, Plan

FIELDS = ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets")
ACTIVE_BYTES = 64 * 1024  # a switch port whose series is kept: more than control traffic

PortStats = Mapping[str, int]  # FIELDS -> counter value
Sample = tuple[float, int]


class Recording(TypedDict):
    """What counters.PortCounters recorded: "node:port" -> stats, and sampled series."""

    start: dict[str, dict[str, int]]
    end: dict[str, dict[str, int]]
    series: dict[str, list[Sample]]  # "node:port" -> [(t since the run's start, tx bytes since start)]
    sample_every_s: float


class Bystanders(TypedDict):
    hosts: list[str]
    rx_bytes: int
    rx_packets: int
    by_host: dict[str, int]  # host -> bytes received


class Traffic(TypedDict):
    """results.json's `traffic` (docs/congestion.md lists the keys)."""

    ports: dict[str, dict[str, int]]
    links: dict[str, dict[str, Any]]
    spine_bytes: dict[str, int]
    spine_packets: dict[str, int]
    rail_bytes: dict[str, int]  # "0".."N-1" -> bytes the hosts' NICs on that rail sent
    bystanders: Bystanders
    sample_every_s: float
    series: dict[str, list[Sample]]


def port_key(node: str, port: str) -> str:
    return f"{node}:{port}"


def link_key(a: str, b: str) -> str:
    return f"{a}-{b}"


def deltas(start: Mapping[str, PortStats], end: Mapping[str, PortStats]
           ) -> dict[str, dict[str, int]]:
    """Per port, how much each counter grew (ports read at both ends only). A counter that
    went down (a device recreated) counts from zero."""
    out = {}
    for key, e in end.items():
        s = start.get(key)
        if s is None:
            continue
        out[key] = {f: e.get(f, 0) - s.get(f, 0) if e.get(f, 0) >= s.get(f, 0) else e.get(f, 0)
                    for f in FIELDS}
    return out


def bystanders(plan: Plan, endpoints: Iterable[tuple[str, str]]) -> list[str]:
    """Hosts that are neither the source nor the destination of any flow."""
    busy = {h for pair in endpoints for h in pair}
    return [h.name for h in plan.hosts if h.name not in busy]


def summarize(plan: Plan, rec: Recording, endpoints: Sequence[tuple[str, str]]) -> Traffic:
    """results.json's `traffic` from a recording; `endpoints`: every flow's (src, dst)."""
    ports = deltas(rec["start"], rec["end"])
    zero = dict.fromkeys(FIELDS, 0)
    links: dict[str, dict[str, Any]] = {}
    for link in plan.links:
        a = ports.get(port_key(link.a, link.a_ifname), zero)
        b = ports.get(port_key(link.b, link.b_ifname), zero)
        links[link_key(link.a, link.b)] = {
            "bytes": a["tx_bytes"] + b["tx_bytes"], "packets": a["tx_packets"] + b["tx_packets"],
            "tx_bytes": {link.a: a["tx_bytes"], link.b: b["tx_bytes"]}}
    spines = plan.of_kind(Kind.SPINE)
    spine_bytes = {s.name: sum(ports.get(port_key(s.name, p.name), zero)["tx_bytes"]
                               for p in s.interfaces) for s in spines}
    spine_packets = {s.name: sum(ports.get(port_key(s.name, p.name), zero)["tx_packets"]
                                 for p in s.interfaces) for s in spines}
    rail_bytes: dict[str, int] = {}
    for h in plan.hosts:
        if len(h.addresses) > 1:  # a NIC per rail
            for p in h.interfaces:
                key = str(p.rail or 0)
                rail_bytes[key] = rail_bytes.get(key, 0) + ports.get(port_key(h.name, p.name),
                                                                     zero)["tx_bytes"]
    quiet = bystanders(plan, endpoints)
    by_host = {h: sum(ports.get(port_key(h, p.name), zero)["rx_bytes"]
                      for p in plan.node(h).interfaces) for h in quiet}
    rx_packets = sum(ports.get(port_key(h, p.name), zero)["rx_packets"]
                     for h in quiet for p in plan.node(h).interfaces)
    series = {k: [(float(t), int(v)) for t, v in s] for k, s in sorted(rec["series"].items())
              if ports.get(k, zero)["tx_bytes"] >= ACTIVE_BYTES}
    return {"ports": ports, "links": links, "spine_bytes": spine_bytes,
            "spine_packets": spine_packets, "rail_bytes": rail_bytes,
            "bystanders": {"hosts": quiet, "rx_bytes": sum(by_host.values()),
                           "rx_packets": rx_packets, "by_host": by_host},
            "sample_every_s": rec["sample_every_s"], "series": series}


def spine_series(spines: Iterable[str], series: Mapping[str, Sequence[Sample]]
                 ) -> dict[str, list[Sample]]:
    """Each spine's cumulative tx bytes over time: its sampled ports summed at each sample
    time (ports are sampled together, so their times line up)."""
    out: dict[str, list[Sample]] = {}
    for spine in spines:
        own = [s for k, s in series.items() if k.split(":", 1)[0] == spine and s]
        totals: dict[float, int] = {}
        for s in own:
            for t, v in s:
                totals[float(t)] = totals.get(float(t), 0) + int(v)
        if totals:
            out[spine] = sorted(totals.items())
    return out
