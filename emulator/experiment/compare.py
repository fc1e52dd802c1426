"""A compare run's results (pure): the same experiment on several fabrics, side by side.

`rocelab run` on an experiment with `fabrics:` runs it on each fabric in turn
(runner.run_compare); each fabric's results are a normal run's results.json content.
This module puts them together:

    {"kind": "compare", "name": ..., "description": ..., "topologies": {label: file},
     "fabrics": {label: <that fabric's results>},
     "compare": {metric: {label: value}},      # ROWS below; value None where it has none
     "expectations": [...], "integrity_ok": ...}

Every metric is a dotted path into a fabric's results, so compare[M][L] is the value at
fabrics.L.M (an `expect:` line addresses it that way). `expect:` lines whose path starts
with `fabrics.` are checked once against the whole document (they compare fabrics);
every other line must hold on every fabric.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from ..errors import ExitCode
from . import expect_lines
from .analysis import Results
from .analysis import verdict as fabric_verdict
from .spec import Experiment

# Rows every compare has, in this order (per flow: FLOW_ROWS for each of the experiment's flows)
SUMMARY_ROWS = ("summary.goodput_bps", "summary.fct_max_s", "summary.interruption_s",
                "summary.interruption_real_s")
FLOW_ROWS = ("goodput_bps", "fct_s", "interruption_s", "rx_gap_s")
TRAFFIC_ROWS = ("traffic.bystanders.rx_bytes", "traffic.bystanders.rx_packets")
# Rows present when they apply to some fabric
HANDOFF_ROWS = ("summary.handoff_p50_s", "summary.handoff_p99_s")
FAULT_ROWS = ("summary.convergence_s", "summary.faults_settled")
BROADCAST_ROWS = ("frames", "uplink_copies_per_frame", "vxlan_copies_per_frame")
SHAPED_ROWS = ("lossless_drops", "pfc.pauses", "trimming.trim", "trimming.last_hop")
TRANSPORT_ROWS = ("summary.failed_flows", "summary.longest_interruption_s",  # RC vs MRC
                  "summary.retransmitted_bytes", "summary.path_jain", "summary.path_spread",
                  "summary.spine_jain", "summary.spine_spread",
                  "summary.goodput_vs_bisection")
FLOW_TRANSPORT_ROWS = ("longest_interruption_s", "retransmitted_bytes", "slowdown")


class CompareResults(TypedDict):
    """results.json of a compare run (docs/cli.md lists every key)."""

    kind: str  # "compare"
    name: str
    description: str
    topologies: dict[str, str]  # label -> topology file
    fabrics: dict[str, Results]
    compare: dict[str, dict[str, Any]]  # metric (a path into each fabric's results) -> label -> value
    expectations: list[dict[str, Any]]
    integrity_ok: bool


def crosses(line: str) -> bool:
    """Does this `expect:` line address fabrics (fabrics.LABEL...) rather than one run?"""
    e = expect_lines.parse(line)
    return e.path[:1] == ("fabrics",) or (e.ref or ())[:1] == ("fabrics",)


def per_fabric(lines: Sequence[str]) -> list[str]:
    """The lines each fabric's own results are checked against."""
    return [line for line in lines if not crosses(line)]


def value(results: Mapping[str, Any], metric: str) -> Any:
    """The value at a dotted path of one fabric's results, or None."""
    hits = expect_lines.lookup(results, tuple(metric.split(".")))
    if len(hits) != 1 or isinstance(hits[0][1], KeyError):
        return None
    return hits[0][1]


def metrics(fabrics: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The rows of `compare`, in order (see the module docstring)."""
    runs = list(fabrics.values())

    def any_has(metric: str) -> bool:
        return any(value(r, metric) is not None for r in runs)

    flows = list(dict.fromkeys(f["name"] for r in runs for f in r.get("flows", [])))
    out = list(SUMMARY_ROWS)
    out += [m for m in HANDOFF_ROWS if any_has(m)]
    out += [m for m in FAULT_ROWS if any_has(m)]
    out += [m for m in TRANSPORT_ROWS if any_has(m)]
    for name in flows:
        out += [f"flows.{name}.{k}" for k in FLOW_ROWS]
        out += [m for m in (f"flows.{name}.{k}" for k in FLOW_TRANSPORT_ROWS) if any_has(m)]
        out += [m for m in (f"flows.{name}.handoff_p50_s", f"flows.{name}.handoff_p99_s")
                if any_has(m)]
    events = max((len(r.get("events", [])) for r in runs), default=0)
    for i in range(events):  # fault events carry their routing convergence
        for k in ("detect_s", "converge_s"):
            if any_has(f"events.{i}.convergence.{k}"):
                out.append(f"events.{i}.convergence.{k}")
        for k in BROADCAST_ROWS:  # a broadcast burst: the copies its leaf sent upstream
            if any_has(f"events.{i}.{k}"):
                out.append(f"events.{i}.{k}")
    spines = list(dict.fromkeys(s for r in runs for s in ((r.get("traffic") or {})
                                                           .get("spine_bytes") or {})))
    out += [f"traffic.spine_bytes.{s}" for s in spines]
    out += [m for m in (f"summary.path_bytes.{s}" for s in spines) if any_has(m)]
    rails = sorted({k for r in runs for k in ((r.get("traffic") or {}).get("rail_bytes") or {})},
                   key=int)
    out += [f"traffic.rail_bytes.{k}" for k in rails]
    out += list(TRAFFIC_ROWS)
    out.append("integrity_ok")
    if any(r.get("link_rate_bps") for r in runs):
        out += list(SHAPED_ROWS)
    measured = dict.fromkeys(k for r in runs for k, v in (r.get("measured") or {}).items()
                             if v is None or isinstance(v, (bool, int, float, str)))
    out += [f"measured.{k}" for k in measured]
    return out


def rows(fabrics: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """metric -> {label: value}: the fabrics side by side."""
    return {m: {label: value(r, m) for label, r in fabrics.items()} for m in metrics(fabrics)}


def evaluate(doc: Mapping[str, Any], line: str) -> dict[str, Any]:
    """One `expect:` line on a compare document: a `fabrics.` line once, on the whole of
    it; any other line on each fabric's results (it must hold on all of them)."""
    e = expect_lines.parse(line)
    if crosses(line):
        return expect_lines.evaluate(dict(doc), e)
    values: dict[str, Any] = {}
    problems = []
    for label, res in doc["fabrics"].items():
        got = expect_lines.evaluate(dict(res), e)
        values.update({f"fabrics.{label}.{k}": v for k, v in got["values"].items()})
        if not got["ok"]:
            problems.append(f"{label}: {got['problem']}")
    return {"expect": e.text, "ok": not problems, "values": values,
            "problem": "; ".join(problems) or None}


def summarize(exp: Experiment, fabrics: Mapping[str, Results],
              topologies: Mapping[str, str]) -> CompareResults:
    """results.json of a compare run from each fabric's results."""
    out: CompareResults = {
        "kind": "compare", "name": exp.name, "description": exp.description,
        "topologies": dict(topologies), "fabrics": dict(fabrics), "compare": rows(fabrics),
        "expectations": [], "integrity_ok": all(r["integrity_ok"] for r in fabrics.values()),
    }
    out["expectations"] = [evaluate(out, line) for line in exp.expect]
    return out


def verdict(results: CompareResults) -> tuple[ExitCode, str]:
    """How a compare run ended, worst first over every fabric (a flow failed, data
    corrupted, the lossless class dropped), then its `expect:` lines; with a reason."""
    found: dict[ExitCode, list[str]] = {}
    for label, r in results["fabrics"].items():
        code, why = fabric_verdict({**r, "expectations": []})
        if code:
            found.setdefault(code, []).append(f"{label}: {why}")
    for code in (ExitCode.TRANSFER_FAILED, ExitCode.INTEGRITY_FAILED, ExitCode.EXPECTATION_FAILED):
        if code in found:
            return code, "; ".join(found[code])
    missed = [e for e in results["expectations"] if not e["ok"]]
    if missed:
        return ExitCode.EXPECTATION_FAILED, "; ".join(f"{e['expect']} ({e['problem']})"
                                                      for e in missed)
    return ExitCode.OK, "every fabric's flows, integrity and expectations ok"
