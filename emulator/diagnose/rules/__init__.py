"""The rules: each a pure function of the Evidence, returning Findings (docs/diagnose.md).

A rule reads counters only, never what an experiment injected. Each finding says its
root cause in one sentence, the counters behind it (node, port, TC, value, when), the
flows and hosts it hurt, and what to change. `score` orders findings of one severity:
root causes (a host that stopped draining, ECN off, a dropped lossless frame) above the
symptoms they cause (a pause storm, a congested spine).

    common.py   Finding, Severity, evidence items, shared views (above Kmin, a flow's hops)
    pfc.py      pause-storm, lossless-drops
    ecn.py      ecn-off, dcqcn-off-host
    ecmp.py     ecmp-collision, congested-spine
    routing.py  routing (sessions, ECMP width, prefixes, FRR, silent links)
    links.py    gray-link, mtu-mismatch
    trimming.py trimming-hotspot

`RULES` run on the evidence alone; `congested_spine`, `silent_links` and `gray_link`
take what the others found (diagnose/__init__.py runs them in that order).
"""

from __future__ import annotations

from collections.abc import Callable

from ..evidence import Evidence
from .common import (
                     ROCE_TC,
                     AboveKmin,
                     Finding,
                     Severity,
                     above_kmin,
                     active,
                     ce_entering,
                     first_rise,
                     flow_hops,
                     flow_links,
                     item,
                     latency,
                     mark_probability,
                     tc3_ports,
)
from .ecmp import congested_spine, ecmp_collision
from .ecn import dcqcn_host, ecn_off
from .links import gray_link, mtu_mismatch
from .pfc import lossless_drops, pause_storm
from .routing import routing, silent_links
from .trimming import trimming_hotspot

RULES: tuple[Callable[[Evidence], list[Finding]], ...] = (
    pause_storm, ecn_off, dcqcn_host, ecmp_collision, routing, lossless_drops, mtu_mismatch,
    trimming_hotspot)

__all__ = ["ROCE_TC", "RULES", "AboveKmin", "Finding", "Severity", "above_kmin", "active",
           "ce_entering", "congested_spine", "dcqcn_host", "ecmp_collision", "ecn_off",
           "first_rise", "flow_hops", "flow_links", "gray_link", "item", "latency",
           "lossless_drops", "mark_probability", "mtu_mismatch", "pause_storm", "routing",
           "silent_links", "tc3_ports", "trimming_hotspot"]
