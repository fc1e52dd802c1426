"""Benchmark section `l2`: bring-up of the bridged fabrics against the routed one, measured
in the same run, and the L2-vs-L3 demos' headline numbers.

Target (issue: L2 vs L3): l2-2x4 and evpn-2x4 reach converged within 2x the l3 fabric's
time plus the spanning tree's own wait (2 x forward delay: listening, then learning).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

from .. import lab
from .fabric import one_run

FABRICS = {"l3": "topologies/clos-2x4.yaml", "l2": "topologies/l2-2x4.yaml",
           "evpn": "topologies/evpn-2x4.yaml"}
DEMOS = ("l2-vs-l3-link-failure", "l2-vs-l3-bisection", "l2-vs-l3-mac-overflow",
         "evpn-ingress-replication", "l2-vs-l3-storm")


def bring_up(repeats: int, log: Any) -> dict[str, Any]:
    medians: dict[str, float] = {}
    out: dict[str, Any] = {}
    for label, topology in FABRICS.items():
        runs = [one_run(topology, f"bench-{label}-up")["total_s"] for _ in range(repeats)]
        medians[label] = statistics.median(runs)
        log(f"l2 bring-up {label}: median {medians[label]:.2f} s over {repeats}")
        out[label] = {"total_s_median": round(medians[label], 3), "runs_s": runs}
    forward_delay = lab.load_topology(FABRICS["l2"])[1].l2.forward_delay_s  # type: ignore[union-attr]
    for label in ("l2", "evpn"):
        stp = 2 * forward_delay if label == "l2" else 0
        target = 2 * medians["l3"] + stp
        out[label] |= {"target_s": round(target, 3), "stp_wait_s": stp,
                       "meets_target": medians[label] <= target,
                       "ratio_vs_l3": round(medians[label] / medians["l3"], 2),
                       "ratio_vs_l3_excluding_stp_wait": round(
                           (medians[label] - stp) / medians["l3"], 2)}
    return out


def demos(log: Any) -> dict[str, Any]:
    """Each demo experiment once; its compare table (every fabric's headline numbers)."""
    from ..experiment import runner  # heavy: only when the section runs

    out: dict[str, Any] = {}
    for stem in DEMOS:
        path = Path("experiments") / f"{stem}.yaml"
        log(f"l2 demo {stem}")
        results, _ = runner.run_compare(path, name=f"bench-{stem.split('-')[-1][:8]}")
        out[stem] = {"compare": results["compare"],
                     "expectations_ok": all(e["ok"] for e in results["expectations"])}
    return out


def run(repeats: int = 3, log: Any = lambda m: print(m, file=sys.stderr)) -> dict[str, Any]:
    return {"bring_up": bring_up(repeats, log), "demos": demos(log)}
