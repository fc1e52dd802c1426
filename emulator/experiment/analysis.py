"""Pure numbers over an experiment's recordings: rates, fairness, utilisation, and the
summary that becomes results.json.

The runner records (`FlowRecord`s, sampled ports, timeline events, PFC snapshots);
everything here is a function of those recordings alone, so it is unit-tested on
series recorded from real runs. The arithmetic over one series (rates, windows, the
longest time without progress, a port's steady state) is `series.py`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

from ..errors import ExitCode
from ..metrics.snapshot import PortSample
from ..plan import Plan
from ..plan.congestion import ROCE_TC
from ..stats import jain, p50_p99
from ..units import Dilation, parse_duration
from . import expect_lines, multipath, traffic
from .series import Series, bottleneck, bytes_between, interruption, mean_rate, rates
from .spec import Experiment

COUNTERS = ("retransmitted_packets", "timeouts", "naks_rx", "cnps_rx", "cnps_tx", "bad_icrc")  # per flow


class FlowSummary(multipath.FlowTransport, total=False):
    """One flow in results.json (durations in wall seconds since the run's start)."""

    name: str
    src: str
    dst: str
    op: str
    bytes: int
    start_s: float
    end_s: float | None  # None unless every transfer completed
    fct_s: float | None
    fct_real_s: float | None  # fct_s / D
    goodput_bps: float | None
    integrity_ok: bool
    error: str | None
    retransmitted_packets: int
    timeouts: int
    naks_rx: int
    cnps_rx: int
    cnps_tx: int
    bad_icrc: int  # datagrams dropped for a bad ICRC, both ends (a corrupting link)
    spines: list[str]
    rate_series: list[tuple[float, float]]  # (t, bit/s)
    handoffs: list[list[float]]  # repeated flows: [start, duration] of each transfer
    handoff_p50_s: float | None  # repeated flows
    handoff_p99_s: float | None
    interruption_s: float | None  # longest time without delivery progress (see interruption())
    interruption_real_s: float | None  # interruption_s / D
    interruption_from_s: float | None  # when that time began
    rx_gap_s: float | None  # the engine's: longest gap in in-order delivery on any receiving QP
    qps: list[dict[str, Any]]  # per QP of every transfer: udp_sport, spine, rail, retransmits,
    # NAKs, CNPs, bad ICRC and its DCQCN end state (None: DCQCN off); what `diagnose` reads


class Summary(multipath.PathSummary):
    """results.json's `summary`: the run in a few numbers, for tables and comparisons."""

    bytes: int  # every flow's payload
    goodput_bps: float | None  # completed flows' bytes over first start .. last end
    fct_max_s: float | None
    interruption_s: float | None  # the longest of any flow's
    interruption_real_s: float | None
    handoff_p50_s: float | None  # over every repeated flow's transfers
    handoff_p99_s: float | None
    convergence_s: float | None  # the slowest fault event's routing convergence (converge_s)
    faults_settled: bool | None  # every fault event's routing settled (None: no faults)


class Results(TypedDict):
    """results.json of `rocelab run`: the top level (docs/congestion.md lists every key)."""

    experiment: str
    lab: str
    dilation: float  # D; real-equivalent time = wall / D
    link_rate_bps: int | None  # the shaped rate; None on an unshaped lab
    declared_speed_bps: int  # the topology's link speed
    flows: list[FlowSummary]
    ports: list[PortSample]  # sampled (node, port, TC) series
    events: list[dict[str, Any]]  # timeline actions as done (faults: their events)
    steady: dict[str, Any]  # from_s, to_s, rates_bps, jain, bottleneck
    pfc: dict[str, Any]  # pauses, reaction_us_p50/p99, paused_s
    phases: dict[str, dict[str, Any]]
    lossless_drops: int | None
    integrity_ok: bool
    expectations: list[dict[str, Any]]  # each `expect:` line: expect, ok, values, problem
    summary: Summary
    traffic: traffic.Traffic | None  # kernel port counters (None: not recorded)
    measured: dict[str, Any]  # what a caller's measures added (runner.Measure), else {}
    evidence: dict[str, Any] | None  # what `rocelab diagnose --results` reads (diagnose/evidence.py)
    trimming: dict[str, int] | None  # packets trimmed: trim, tx_trim, dropped_trim, last_hop,
    # fabric (sampler.trims; None: no congestion plane)


@dataclass(frozen=True)
class FlowRecord:
    """What a run recorded of one flow; times in wall seconds since the run's start."""

    name: str
    src: str
    dst: str
    op: str
    bytes: int  # every transfer's payload together
    start_s: float
    end_s: float | None  # None unless every transfer completed
    series: list[tuple[float, float]]  # (t, cumulative bytes delivered)
    repeat: int = 1
    handoffs: list[tuple[float, float]] = field(default_factory=list)  # (start, duration)
    result: dict[str, Any] | None = None  # the engine's results folded into one
    error: str | None = None
    delivered: list[tuple[float, float]] = field(default_factory=list)  # (t, bytes completed)
    via: str | None = None  # the spine the flow was pinned to (`via`)
    data_phases: list[tuple[float, float]] = field(default_factory=list)  # per transfer: data
    # start .. end (a failed one: when it began .. the failure)
    transport: str = "rc"
    may_fail: bool = False  # a failure is recorded, not the run's verdict
    unloaded: str | None = None  # the flow whose FCT is this one's unloaded reference
    qp_bytes: list[int] = field(default_factory=list)  # one transfer's payload per QP
    mtu: int = 4096

    @property
    def fct_s(self) -> float | None:
        return self.end_s - self.start_s if self.result is not None and self.end_s is not None \
            else None


@dataclass(frozen=True)
class Recordings:
    """What one run recorded, as `summarize` reads it."""

    flows: list[FlowRecord]
    ports: list[PortSample]
    events: list[dict]  # the timeline's
    pfc0: dict  # the PFC controller's snapshot (pfc.json) before the run
    pfc1: dict  # and after it
    lossless_drops: int | None  # None: no congestion model
    counters: traffic.Recording | None = None
    measured: dict[str, Any] | None = None
    evidence: dict[str, Any] | None = None
    trimming: dict[str, int] | None = None


def summarize(exp: Experiment, plan: Plan, rec: Recordings) -> Results:
    """results.json's content from a run's recordings (see docs/congestion.md for its keys)."""
    cp = plan.congestion
    flows, ports, events, pfc0, pfc1 = rec.flows, rec.ports, rec.events, rec.pfc0, rec.pfc1
    flow_out = [flow_summary(f, plan.dilation) for f in flows]
    multipath.add_slowdowns(cast(list[dict[str, Any]], flow_out), {f.name: f.unloaded for f in flows})
    starts = [f["start_s"] for f in flow_out]
    ends = [f["end_s"] for f in flow_out if f["end_s"] is not None]
    steady0 = min(starts) + parse_duration(exp.steady_after)
    steady1 = min(ends) if ends else steady0
    series = {f.name: f.series for f in flows}
    steady_rates = {n: mean_rate(s, steady0, steady1) for n, s in series.items()}
    if steady1 <= steady0:  # a flow ended before steady_after: no common steady state
        steady_rates = {}
    reactions = pfc1.get("reaction_us", [])[len(pfc0.get("reaction_us", [])):]
    reaction_p50, reaction_p99 = p50_p99(reactions, 1)
    out: Results = {
        "experiment": exp.name, "lab": plan.lab, "dilation": plan.dilation,
        "link_rate_bps": cp.rate_of(plan.speed_bps) if cp else None,
        "declared_speed_bps": plan.speed_bps,
        "flows": flow_out, "ports": ports, "events": events,
        "steady": {"from_s": steady0, "to_s": steady1,
                   "rates_bps": steady_rates,
                   "jain": jain(list(steady_rates.values())) if steady_rates else None,
                   "bottleneck": bottleneck(ports, steady0, steady1, cp.rate_of(plan.speed_bps), ROCE_TC)
                   if cp else None},
        "pfc": {"pauses": pfc1.get("pauses", 0) - pfc0.get("pauses", 0),
                "reaction_us_p50": reaction_p50, "reaction_us_p99": reaction_p99,
                "paused_s": paused_between(pfc0, pfc1)},
        "phases": {name: phase(members, flow_out, series, ports)
                   for name, members in exp.phases.items()},
        "lossless_drops": rec.lossless_drops,
        "integrity_ok": all(f["integrity_ok"] for f in flow_out  # a failure allowed: no data
                            if not (f.get("may_fail") and f.get("failed"))),
        "expectations": [],
        "summary": summary(flow_out, events, plan.dilation),
        "traffic": traffic.summarize(plan, rec.counters, [(f.src, f.dst) for f in flows])
        if rec.counters is not None else None,
        "measured": dict(rec.measured or {}),
        "evidence": rec.evidence,
        "trimming": rec.trimming,
    }
    out["summary"].update(multipath.summary(plan, flow_out, out["summary"]["goodput_bps"],
                                            out["traffic"]["spine_bytes"] if out["traffic"] else None))
    out["expectations"] = [expect_lines.evaluate(dict(out), expect_lines.parse(line)) for line in exp.expect]
    return out


def paused_between(pfc0: Mapping[str, Any], pfc1: Mapping[str, Any]) -> dict[str, float]:
    """"node:port:tc" -> wall seconds that egress class was paused between two PFC
    controller snapshots (pfc.json); classes not paused in between are left out."""
    before = pfc0.get("paused_s", {})
    return {k: round(v - before.get(k, 0.0), 4) for k, v in pfc1.get("paused_s", {}).items()
            if v - before.get(k, 0.0) > 0}


def summary(flows: Sequence[FlowSummary], events: Sequence[dict[str, Any]],
            dilation: Dilation) -> Summary:
    """The run in a few numbers (results.json's `summary`)."""
    done = [f for f in flows if f["fct_s"] is not None]
    span = (max(f["end_s"] or 0.0 for f in done) - min(f["start_s"] for f in done)) if done else 0.0
    gaps = [g for f in flows if (g := f.get("interruption_s")) is not None]
    handoffs = [d for f in flows for _, d in f.get("handoffs", [])]
    convs = [e["convergence"] for e in events
             if e.get("kind") == "fault" and isinstance(e.get("convergence"), dict)]
    times = [c["converge_s"] for c in convs if c.get("converge_s") is not None]
    worst = max(gaps) if gaps else None
    p50, p99 = p50_p99(handoffs, 4)
    return {
        "bytes": sum(f["bytes"] for f in flows),
        "goodput_bps": sum(f["bytes"] for f in done) * 8 / span if done and span > 0 else None,
        "fct_max_s": max(f["fct_s"] or 0.0 for f in done) if done else None,
        "interruption_s": worst,
        "interruption_real_s": dilation.real_s(worst) if worst is not None else None,
        "handoff_p50_s": p50, "handoff_p99_s": p99,
        "convergence_s": max(times) if times else None,
        "faults_settled": all(c.get("settled") for c in convs) if convs else None,
    }


def verdict(results: Results) -> tuple[ExitCode, str]:
    """How a run ended, worst first: a flow failed (8), data corrupted (9), an expectation
    or the lossless class failed (11), or all well (0); with a one-line reason."""
    failed = [f["name"] for f in results["flows"] if f.get("error") and not f.get("may_fail")]
    if failed:
        return ExitCode.TRANSFER_FAILED, f"flows failed: {', '.join(failed)}"
    if not results["integrity_ok"]:
        bad = [f["name"] for f in results["flows"] if not f["integrity_ok"]]
        return ExitCode.INTEGRITY_FAILED, f"integrity failed: {', '.join(bad)}"
    if results["lossless_drops"]:
        return ExitCode.EXPECTATION_FAILED, (f"the lossless class dropped "
                                             f"{results['lossless_drops']} packets")
    missed = [e for e in results.get("expectations", []) if not e["ok"]]
    if missed:
        return ExitCode.EXPECTATION_FAILED, "; ".join(f"{e['expect']} ({e['problem']})"
                                                      for e in missed)
    return ExitCode.OK, "every flow, integrity and expectation ok"


def phase(members: list[str], flows: Sequence[FlowSummary], series: Mapping[str, Series],
          ports: list[PortSample]) -> dict[str, Any]:
    """A window from the first start to the last end of `members`: every flow's mean rate
    while it ran inside the window, and the pause frames sent in it."""
    last = max((s[-1][0] for s in series.values() if s), default=0.0)
    span = {f["name"]: (f["start_s"], f["end_s"] if f["end_s"] is not None else last)
            for f in flows}
    t0 = min(span[m][0] for m in members)
    t1 = max(span[m][1] for m in members)
    rates_in = {}
    for name, (a, b) in span.items():
        a, b = max(a, t0), min(b, t1)
        if b > a:
            rates_in[name] = mean_rate(series[name], a, b)
    handoffs = {}  # repeated flows: their transfers that started in the window
    for f in flows:
        durations = sorted(d for a, d in f.get("handoffs", []) if t0 <= a <= t1)
        if durations:
            p50, p99 = p50_p99(durations)
            handoffs[f["name"]] = {"count": len(durations), "p50_s": p50, "p99_s": p99,
                                   "max_s": durations[-1]}
    pauses = sum(bytes_between(p["series"].get("pause_tx", []), t0, t1) for p in ports)
    fct_p50, fct_p99 = p50_p99([f.get("fct_s") or 0.0 for f in flows  # its flows' FCTs
                                if f["name"] in members and f.get("fct_s") is not None], 4)
    return {"from_s": t0, "to_s": t1, "rates_bps": rates_in, "handoffs": handoffs,
            "pauses": round(pauses), "fct_p50_s": fct_p50, "fct_p99_s": fct_p99}


def flow_summary(f: FlowRecord, dilation: Dilation) -> FlowSummary:
    """One flow's entry in results.json."""
    r = f.result or {}
    fct = f.fct_s
    out: FlowSummary = {
        "name": f.name, "src": f.src, "dst": f.dst, "op": f.op,
        "bytes": f.bytes, "start_s": round(f.start_s, 4),
        "end_s": round(f.end_s, 4) if fct is not None and f.end_s is not None else None,
        "fct_s": fct, "fct_real_s": dilation.real_s(fct) if fct else None,
        "goodput_bps": f.bytes * 8 / fct if fct else None,
        "integrity_ok": bool(r.get("integrity_ok")), "error": f.error,
        "retransmitted_packets": r.get("retransmitted_packets", 0),  # COUNTERS, in order
        "timeouts": r.get("timeouts", 0), "naks_rx": r.get("naks_rx", 0),
        "cnps_rx": r.get("cnps_rx", 0), "cnps_tx": r.get("cnps_tx", 0),
        "bad_icrc": r.get("bad_icrc", 0),
        "spines": sorted({q["spine"] for q in r.get("qps", []) if q.get("spine")}
                         or ([f.via] if f.via else [])),  # a failed flow: where it was pinned
        "qps": [qp_summary(q) for q in r.get("qps", [])],
        "rate_series": rates(f.series),
        "interruption_s": None, "interruption_real_s": None, "interruption_from_s": None,
        "rx_gap_s": r.get("interruption_s") if f.result is not None else None,
    }
    got = flow_interruption(f)
    if got is not None:
        began, length = got
        out["interruption_s"] = round(length, 4)
        out["interruption_real_s"] = dilation.real_s(round(length, 4))
        out["interruption_from_s"] = round(began, 4)
    out.update(multipath.flow_numbers(f.transport, f.result, f.error, f.qp_bytes, f.mtu,
                                      out["interruption_s"]))
    if f.may_fail:
        out["may_fail"] = True
    if f.repeat > 1:
        out["handoffs"] = [[round(a, 4), round(d, 4)] for a, d in f.handoffs]
        durations = [d for _, d in f.handoffs]
        out["handoff_p50_s"], out["handoff_p99_s"] = p50_p99(durations, 4)
    return out


QP_KEYS = ("udp_sport", "spine", "rail", "retransmitted_packets", "naks_rx", "timeouts",
           "cnps_rx", "cnps_tx", "bad_icrc")


def qp_summary(q: dict[str, Any]) -> dict[str, Any]:
    """One QP of a flow in results.json: its path and what went wrong on it."""
    d = q.get("dcqcn")
    return {**{k: q.get(k) for k in QP_KEYS},
            "dcqcn": {k: d.get(k) for k in ("reductions", "lowest_bps", "line_bps", "min_rate_bps")}
            if isinstance(d, dict) else None}


def flow_interruption(f: FlowRecord) -> tuple[float, float] | None:
    """A flow's longest time without progress, from its first transfer's data phase (its
    first QP setup is time to first byte, not an interruption) to its end: stalls in
    data, and a later transfer's setup held up by the fabric, between its delivered
    bytes (completions). Recordings without those: its sent bytes over the whole flow."""
    series = f.delivered or f.series
    if not series:
        return None
    last = f.end_s if f.result is not None and f.end_s is not None else max(
        [series[-1][0]] + [b for _, b in f.data_phases])
    start = f.data_phases[0][0] if f.data_phases else f.start_s
    return interruption(series, start, last, [a for a, _ in f.data_phases[1:]])
