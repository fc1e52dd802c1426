"""Fault benchmark: convergence and interruption of in-flight KV transfers on clos-2x4.

Scenarios (each run: baseline transfers, the same transfers with the fault
injected once they move data, heal; see emulator/faults/impact.py):
  carrier            leaf1's busiest uplink loses carrier          (clos-2x4)
  silent+bfd         leaf1's busiest uplink drops everything       (clos-2x4-bfd, 100 ms x 3)
  silent+hold-timer  the same without BFD                          (clos-2x4-shorthold, hold 3 s)
  spine              the busiest spine loses every link, 4 pairs   (clos-2x4)
Numbers are reported, not judged: the machine has two cores.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from typing import Any

from .. import lab, workload
from ..engine.job import Job, Op
from ..faults import impact
from ..plan import Plan

LAB_PREFIX = "bench-f-"
SUMMARY_KEYS = ("detect_s", "converge_s", "heal_converge_s", "interruption_max_s", "slowdown_max",
                "retransmitted_packets", "timeouts", "flows_failed")


def _kv(tokens: int, qps: int) -> Job:
    return Job(Op.WRITE, kv={"model": "llama3-70b", "tokens": tokens}, qps=qps,
               extra={"progress_s": 0.1})


def _uplink(silent: bool) -> Callable[[impact.Flows], dict[str, Any]]:
    return lambda f: {"fail": "link", "a": "leaf1", "b": f.busiest_uplink("leaf1"), "silent": silent}


def _one_pair(plan: Plan) -> list:
    return [(plan.node("prefill1"), plan.node("decode1"))]


# scenario -> (topology, action, pairs, job)
SCENARIOS: dict[str, tuple[str, Any, Callable[[Plan], list], Job]] = {
    "carrier": ("clos-2x4", _uplink(False), _one_pair, _kv(512, 4)),
    "silent+bfd": ("clos-2x4-bfd", _uplink(True), _one_pair, _kv(512, 4)),
    "silent+hold-timer": ("clos-2x4-shorthold", _uplink(True), _one_pair, _kv(512, 4)),
    "spine": ("clos-2x4", lambda f: {"fail": "node", "node": f.busiest_spine()},
              workload.default_pairs, _kv(256, 2)),
}


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for key in SUMMARY_KEYS:
        values = [r[key] for r in runs if r.get(key) is not None]
        out[key] = round(statistics.median(values), 4) if values else None
    out["integrity_ok"] = all(r["integrity_ok"] for r in runs)
    return out


def run(repeats: int = 3, log: Callable[[str], None] = lambda m: print(m, file=sys.stderr)
        ) -> dict[str, Any]:
    by_topology: dict[str, list[str]] = {}
    for name, (topology, *_rest) in SCENARIOS.items():
        by_topology.setdefault(topology, []).append(name)
    out: dict[str, Any] = {}
    for topology, names in by_topology.items():
        lab_name = f"{LAB_PREFIX}{topology.removeprefix('clos-2x4').strip('-') or 'base'}"
        try:
            plan = lab.up(f"topologies/{topology}.yaml", name=lab_name).plan
            for name in names:
                out[name] = _scenario(plan, name, repeats, log)
        finally:
            lab.down(lab_name)
    out["bfd_vs_hold_timer"] = {k: {"bfd": out["silent+bfd"]["median"][k],
                                    "hold_timer": out["silent+hold-timer"]["median"][k]}
                                for k in ("detect_s", "converge_s", "interruption_max_s")}
    out["report"] = impact.report_table({k: {"summary": v["median"]} for k, v in out.items()
                                         if k in SCENARIOS})
    return out


def _scenario(plan: Plan, name: str, repeats: int, log: Callable[[str], None]) -> dict[str, Any]:
    topology, action, pairs, job = SCENARIOS[name]
    runs = []
    for i in range(repeats):
        res = impact.fault_impact(plan, action, pairs(plan), job)
        runs.append(res["summary"] | {"event": res["events"][0]["name"]})
        log(f"faults {name} run {i + 1}/{repeats}: converged {runs[-1]['converge_s']} s, "
            f"interruption {runs[-1]['interruption_max_s']} s")
    return {"topology": topology, "flows": len(pairs(plan)), "job": job.to_json(),
            "median": _median(runs), "runs": runs}
