"""What a report shows, read from any results.json rocelab writes (pure).

Three shapes come in: `rocelab run` (experiment results), and `rocelab
transfer`/`kv` with `--out` (their JSON plus the same `flows`, `ports` and
`pfc` keys, see record.py). `ReportData` is the one shape plots, the
topology picture, report.md and report.html read.
"""

from __future__ import annotations

import bisect
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..experiment.series import rates
from ..plan.congestion import CNP_TC
from ..units import Dilation

PLOTS = {  # file -> (title, what it shows)
    "flow_rates.png": ("Per-flow rate", "each flow's sending rate over time"),
    "queue_depth.png": ("Queue depth", "egress queue of the busiest ports over time"),
    "pause_timeline.png": ("PFC pause timeline", "when each port's upstream was paused"),
    "latency_cdf.png": ("Completion-time CDF", "FCT or handoff latency distribution"),
    "ecmp_spread.png": ("ECMP spread", "load each spine carried"),
}


@dataclass
class Flow:
    name: str
    src: str
    dst: str
    series: list[tuple[float, float]]  # (wall s, bit/s) the engine handed to its NIC


@dataclass
class Headline:
    label: str
    value: str
    real: str = ""  # the same number in real-equivalent time, where it is a duration


@dataclass
class ReportData:
    kind: str  # experiment | transfer | kv
    title: str
    lab: str
    dilation: Dilation
    link_rate_bps: float | None  # shaped rate (None: unshaped lab)
    speed_bps: float | None  # declared speed
    duration_s: float
    headline: list[Headline]
    flows: list[Flow]
    latencies: list[float]  # FCT or handoff latency, wall seconds
    latency_label: str
    ports: list[dict[str, Any]]  # sampled ports (runner/sampler format)
    paused_s: dict[str, float]  # "node:port:tc" egress paused -> seconds
    spine_bytes: dict[str, float]  # ECMP spread: bytes each spine forwarded
    spine_qps: dict[str, int]  # ... or QPs (flows, for experiments) that hashed onto it
    events: list[dict[str, Any]] = field(default_factory=list)
    link_bytes: dict[str, float] = field(default_factory=dict)  # "node:port" -> bytes sent
    replay: dict[str, Any] | None = None  # a trace replay's block (report/replay.py)

    @property
    def spine_counts(self) -> str:
        """What spine_qps counts."""
        return "flows with a QP on each spine" if self.kind == "experiment" else \
            "queue pairs hashed onto each spine"
    tables: dict[str, list[list[str]]] = field(default_factory=dict)  # name -> rows (first: header)

    def real(self, wall_s: float | None) -> str:
        """A wall duration in real-equivalent time ("" without time dilation: the same)."""
        return "" if wall_s is None or self.dilation == 1 else _duration(self.dilation.real_s(wall_s))

    def link_load(self) -> dict[tuple[str, str], float]:
        """Bytes each (node, port) sent during the run: the kernel's interface counters
        where recorded (transfer, kv), else the sampled ports' (experiments)."""
        if self.link_bytes:
            return {tuple(k.split(":", 1)): v for k, v in self.link_bytes.items()}  # type: ignore
        load: dict[tuple[str, str], float] = defaultdict(float)
        for p in self.ports:
            load[(p["node"], p["port"])] += p.get("tx_bytes", 0)
        return dict(load)


def _duration(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} us"


def _rate(bps: float | None) -> str:
    return "-" if bps is None else f"{bps / 1e6:.1f} Mbit/s"


def load(results: dict[str, Any]) -> ReportData:
    kind = results.get("kind") or ("experiment" if "experiment" in results else "transfer")
    dilation = Dilation(results.get("dilation") or 1.0)
    flows = [Flow(f["name"], f["src"], f["dst"], smoothed([tuple(x) for x in f.get("rate_series", [])]))
             for f in results.get("flows", [])]
    ends = [t for f in flows for t, _ in f.series[-1:]]
    data = ReportData(
        kind=kind, title=_title(kind, results), lab=results.get("lab", "?"), dilation=dilation,
        link_rate_bps=results.get("link_rate_bps"), speed_bps=results.get("declared_speed_bps"),
        duration_s=float(results.get("recorded_s") or max(ends, default=0.0)),
        headline=[], flows=flows, latencies=[], latency_label="",
        ports=results.get("ports", []),
        paused_s=dict((results.get("pfc") or {}).get("paused_s", {})),
        spine_bytes=_spine_bytes(results.get("ports", []), results.get("link_bytes", {})),
        spine_qps=_spine_qps(results), events=results.get("events", []),
        link_bytes=results.get("link_bytes", {}), replay=_replay_block(results))
    {"experiment": _experiment, "transfer": _transfer, "kv": _kv,
     "replay": _replay}[kind](data, results)
    rails = rail_table(results)
    if rails:
        data.tables["traffic per rail"] = rails
    return data


def rail_table(results: dict[str, Any]) -> list[list[str]]:
    """A rail-optimized fabric: what the hosts' NICs on each rail sent ([]: no rails)."""
    rails = (results.get("traffic") or {}).get("rail_bytes") or {}
    return [["rail", "bytes sent by host NICs"]] + [
        [k, f"{rails[k] / 1e6:.1f} MB"] for k in sorted(rails, key=int)] if rails else []


def binned(series: list[tuple[float, float]], step: float) -> list[tuple[float, float]]:
    """A cumulative series resampled every `step` s from its first sample, by whole bins only.

    Each point is the series at that time, linear between samples: bytes reported in
    a clump are spread over the gap they were sent in, so a bin edge that falls
    between two samples neither empties one bin nor doubles the next.

    The last point is the last whole bin's end: the tail after it (shorter than
    `step`) is left out, because a partial bin divides bytes by a sliver of time
    (a 0.3 ms last bin once drew 25 Mbit/s flows as 800 Mbit/s spikes). A series
    shorter than one bin is one bin, first sample to last: its mean rate over all
    of it is the only honest rate it has (a transfer quicker than `step` still gets one).
    """
    if len(series) < 2:
        return list(series)
    t0, end = series[0][0], series[-1][0]
    whole = int((end - t0) / step + 1e-6)  # bins that fit; 1e-6 forgives float error at an edge
    if whole == 0:
        return [series[0], series[-1]]
    times = [t for t, _ in series]
    return [(round(t0 + k * step, 4), _at(series, times, t0 + k * step)) for k in range(whole + 1)]


def _at(series: list[tuple[float, float]], times: list[float], t: float) -> float:
    """The cumulative series at time t (within it), linear between samples."""
    i = bisect.bisect_left(times, t)
    if i == 0:
        return series[0][1]
    if i == len(times):
        return series[-1][1]
    (ta, a), (tb, b) = series[i - 1], series[i]
    return a + (b - a) * (t - ta) / (tb - ta)


def smoothed(rate_series: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Rates averaged over whole bins of at least 0.1 s (see `binned`). Progress reports
    from several threads arrive in clumps; a rate over the microseconds between two is a
    spike."""
    if len(rate_series) < 3:
        return rate_series
    return rates(binned(cumulative(rate_series), bin_step(rate_series)))


def bin_step(rate_series: list[tuple[float, float]]) -> float:
    """The bin width `smoothed` uses: the median gap between samples, at least 0.1 s."""
    return max(0.1, statistics.median(b[0] - a[0] for a, b in zip(rate_series, rate_series[1:])))


def cumulative(rate_series: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """[(t, bit/s) over the gap before t] -> [(t, bytes so far)], from one gap before the first."""
    out = [(rate_series[0][0] - (rate_series[1][0] - rate_series[0][0]), 0.0)]
    for t, bps in rate_series:
        out.append((t, out[-1][1] + bps * (t - out[-1][0]) / 8))
    return out


def _title(kind: str, r: dict[str, Any]) -> str:
    if kind == "experiment":
        return f"{r['experiment']} on lab {r['lab']}"
    if kind == "kv":
        return f"kv: {r['aggregate']['transfers']} KV-cache handoffs on lab {r['lab']}"
    if kind == "replay":
        return f"replay: {r['replay']['trace']['file']} on lab {r['lab']}"
    return f"transfer: {r['op']} {r['src']} -> {r['dst']} on lab {r['lab']}"


def _is_spine(node: str) -> bool:
    """spine3, or a multi-plane fabric's p1spine2 (plan.skeleton's generated names)."""
    return re.fullmatch(r"(p\d+)?spine\d+", node) is not None


def _spine_bytes(ports: list[dict[str, Any]], link_bytes: dict[str, float]) -> dict[str, float]:
    """Bytes each spine sent down to the leaves: how ECMP spread the load (sampled data
    classes on congestion labs, else the recorded interface counters)."""
    out: dict[str, float] = defaultdict(float)
    for p in ports:
        if _is_spine(p["node"]) and p.get("tc") != CNP_TC:
            out[p["node"]] += p.get("tx_bytes", 0)
    if not ports:
        for key, sent in link_bytes.items():
            if _is_spine(key.split(":")[0]):
                out[key.split(":")[0]] += sent
    return dict(sorted(out.items()))


def _spine_qps(r: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    transfers = r.get("requests") or ([r] if "qps" in r else [])
    for t in transfers:
        for qp in t.get("qps", []):
            out[qp.get("spine", "?")] += 1
    for f in r.get("flows", []):  # experiments record the spine(s) each flow's QPs took
        for spine in f.get("spines", []) if not transfers else []:
            out[spine] += 1
    return dict(sorted(out.items()))


def _common(d: ReportData, integrity: bool) -> None:
    if d.link_rate_bps:
        emulated = f"{(d.speed_bps or 0) / 1e9:g} Gbit/s emulated at {d.link_rate_bps / 1e6:g} Mbit/s"
        d.headline.append(Headline("links", emulated, f"time dilation D = {d.dilation:g}"))
    d.headline.append(Headline("integrity", "ok" if integrity else "FAILED"))


def _times(d: ReportData, label: str, *wall: float) -> Headline:
    """A headline of one or more durations, with their real-equivalents."""
    real = [d.real(w) for w in wall]
    return Headline(label, " / ".join(f"{w:.3f} s" for w in wall),
                    " / ".join(real) if any(real) else "")


def _goodput(d: ReportData, label: str, gbps: float) -> Headline:
    return Headline(label, f"{gbps * 1e3:.1f} Mbit/s",
                    f"{d.dilation.real_bps(gbps):.1f} Gbit/s real-equivalent")


def _errors(c: dict[str, Any]) -> Headline:
    return Headline("retransmitted / NAKs / timeouts",
                    f"{c['retransmitted_packets']} / {c['naks_rx']} / {c['timeouts']}")


def _experiment(d: ReportData, r: dict[str, Any]) -> None:
    _common(d, r["integrity_ok"])
    fcts = [f["fct_s"] for f in r["flows"] if f.get("fct_s")]
    d.latencies, d.latency_label = fcts, "flow completion time"
    if fcts:
        d.headline.append(_times(d, "FCT p50 / max", _p(fcts, 50), max(fcts)))
    s = r["steady"]
    if s["jain"] is not None:
        d.headline.append(Headline("steady-state fairness (Jain)", f"{s['jain']:.3f}",
                                   f"{s['from_s']:.1f}-{s['to_s']:.1f} s wall"))
    if b := s.get("bottleneck"):
        d.headline.append(Headline(
            "bottleneck utilisation", f"{b['utilisation']:.1%}",
            f"{b['node']}:{b['port']} TC {b['tc']}, queue p50 {b['queue_p50'] / 1e3:.0f} KB, "
            f"p90 {b['queue_p90'] / 1e3:.0f} KB, max {b['queue_max'] / 1e3:.0f} KB"))
    if d.link_rate_bps:
        p = r["pfc"]
        reaction = f"reaction p50 {p['reaction_us_p50']} us, p99 {p['reaction_us_p99']} us"
        d.headline += [Headline("PFC pauses", str(p["pauses"]), reaction if p["pauses"] else ""),
                       Headline("lossless-class drops", str(r["lossless_drops"])),
                       Headline("CE marks (switches)",
                                str(sum(x.get("ce_marked", 0) for x in d.ports)))]
    if expectations := r.get("expectations"):  # the experiment's `expect:` lines
        held = sum(e["ok"] for e in expectations)
        d.headline.append(Headline("expectations", f"{held}/{len(expectations)} hold",
                                   "" if held == len(expectations) else "see the table below"))
        d.tables["expectations"] = [["expect", "result", "value"]] + [
            [e["expect"], "ok" if e["ok"] else "FAILED", e["problem"] or ", ".join(
                f"{k} = {_short(v)}" for k, v in list(e["values"].items())[:4])]
            for e in expectations]
    if phases := r.get("phases"):  # one column per phase: each flow's mean rate in it
        d.tables["phases"] = [["flow"] + [f"{n} ({p['from_s']:.1f}-{p['to_s']:.1f} s)"
                                          for n, p in phases.items()]] + [
            [f["name"]] + [_rate(p["rates_bps"].get(f["name"])) for p in phases.values()]
            for f in r["flows"]] + [["PFC pauses"] + [str(p["pauses"]) for p in phases.values()]] + [
            [f"{name} handoff p50 / p99"] + [
                f"{p['handoffs'][name]['p50_s']:.3f} / {p['handoffs'][name]['p99_s']:.3f} s"
                if name in p.get("handoffs", {}) else "-" for p in phases.values()]
            for name in dict.fromkeys(n for p in phases.values() for n in p.get("handoffs", {}))]
    d.tables["flows"] = drop_empty([["flow", "src -> dst", "bytes", "FCT (wall)",
                                      "FCT (real-equiv)", "goodput", "CNPs", "retransmitted",
                                      "integrity"]] + [
        [f["name"], f"{f['src']} -> {f['dst']}", str(f["bytes"]),
         "-" if f["fct_s"] is None else f"{f['fct_s']:.3f} s", d.real(f["fct_s"]),
         _rate(f["goodput_bps"]), str(f["cnps_rx"]), str(f["retransmitted_packets"]),
         "ok" if f["integrity_ok"] else str(f["error"] or "FAILED")] for f in r["flows"]])


def _transfer(d: ReportData, r: dict[str, Any]) -> None:
    _common(d, r["integrity_ok"])
    d.latencies, d.latency_label = [r["handoff_s"]], "handoff latency (QP setup + data)"
    d.headline += [Headline("bytes", f"{r['bytes']}"),
                   _times(d, "data phase", r["duration_s"]),
                   _times(d, "handoff (incl. QP setup)", r["handoff_s"]),
                   _goodput(d, "goodput", r["goodput_gbps"]), _errors(r)]
    d.tables["queue pairs"] = [["QPN", "UDP sport", "spine", "retransmitted", "CNPs rx"]] + [
        [hex(q["qpn"]), str(q["udp_sport"]), q.get("spine", "?"), str(q["retransmitted_packets"]),
         str(q.get("cnps_rx", 0))] for q in r["qps"]]


def _kv(d: ReportData, r: dict[str, Any]) -> None:
    a = r["aggregate"]
    _common(d, a["integrity_ok"])
    d.latencies = [q["handoff_s"] for q in r["requests"]]
    d.latency_label = "handoff latency (QP setup + data)"
    wall = _times(d, "handoffs", a["wall_s"])
    d.headline += [Headline("sizing", r.get("sizing", "")),
                   Headline(wall.label, f"{a['transfers']}, {a['bytes']} bytes in {wall.value}",
                            wall.real),
                   _goodput(d, "aggregate goodput", a["goodput_gbps"]),
                   _times(d, "handoff p50 / p99 / max", a["handoff_p50_s"], a["handoff_p99_s"],
                          a["handoff_max_s"]), _errors(a)]
    d.tables["handoffs"] = drop_empty([["request", "src -> dst", "handoff (wall)", "real-equiv",
                                         "goodput", "integrity"]] + [
        [str(q["request"]), f"{q['src']} -> {q['dst']}", f"{q['handoff_s']:.3f} s",
         d.real(q["handoff_s"]), _rate(q["goodput_gbps"] * 1e9),
         "ok" if q["integrity_ok"] else "FAILED"] for q in r["requests"]])


def _replay_block(results: dict[str, Any]) -> dict[str, Any] | None:
    """`replay --out`'s block, or an experiment's (`measured.replay`) if it finished."""
    block = results.get("replay") or (results.get("measured") or {}).get("replay")
    return block if block and "verdict" in block else None


def _replay(d: ReportData, r: dict[str, Any]) -> None:
    """`rocelab replay --out`: the headline; the verdict, plots and tables are report/replay.py's."""
    v = r["replay"]["verdict"]
    _common(d, v["integrity_ok"])
    # no generic latency CDF: its axes are wall time and wall / D, and a replay's handoffs
    # are real-equivalent at its time scale (report/replay_plots.py draws them)
    d.headline += [Headline("requests", f"{v['requests']} ({v['failed']} failed)"),
                   Headline("SLO attainment", f"{v['attainment']:.1%}",
                            f"within {v['budget_s'] * 1e3:g} ms (real-equivalent)")]


def drop_empty(rows: list[list[str]]) -> list[list[str]]:
    """Without columns that are empty in every row (real-equivalent times, D = 1)."""
    keep = [i for i in range(len(rows[0])) if len(rows) == 1 or any(r[i] for r in rows[1:])]
    return [[r[i] for i in keep] for r in rows]


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
