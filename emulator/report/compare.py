"""The report of a compare run (pure): one column per fabric.

    results.json (kind: compare) -> CompareData: the headline table (goodput, handoffs,
    interruption, convergence, per-spine bytes, bystander bytes, what measures added),
    per-flow and per-fault tables, and what the compare plots draw (plots.draw_compare).

Each fabric also gets its own full report in DIR/LABEL/ (report.write), linked from this one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..experiment.series import rates
from ..experiment.traffic import spine_series
from ..units import Dilation
from . import data as data_mod
from .data import ReportData

COMPARE_PLOTS = {  # file -> (title, what it shows)
    "compare_flow_rates.png": ("Flow rates per fabric", "each flow's sending rate over time, "
                               "one panel per fabric on one scale, with the run's events"),
    "compare_spine_bytes.png": ("Bytes per spine", "bytes each spine sent, grouped by fabric"),
    "compare_spine_rates.png": ("Spine throughput over time", "each spine's sending rate from "
                                "the kernel's port counters, one panel per fabric"),
    "compare_interruption.png": ("Interruption per flow", "each flow's longest time without "
                                 "delivery progress (sampled every 0.1 s), grouped by fabric"),
}
# A transport comparison's interruption chart and rows: the engine's own figure (see
# `engine_figure`); the sampled one's last gap runs to the transfer call's return
ENGINE_INTERRUPTION = ("Interruption per flow", "each flow's longest gap in placed-byte "
                       "progress, measured inside the engine (longest_interruption_s), "
                       "grouped by fabric")
SAMPLED, ENGINE = "interruption_s", "longest_interruption_s"
LABELS = {  # metric -> row label (flows.X.*, events.N.*, traffic.spine_bytes.S: by pattern)
    "summary.goodput_bps": "goodput (all flows)",
    "summary.fct_max_s": "FCT (slowest flow)",
    "summary.interruption_s": "interruption (longest, any flow)",
    "summary.longest_interruption_s": "interruption (longest, any flow; engine)",
    "summary.handoff_p50_s": "handoff p50",
    "summary.handoff_p99_s": "handoff p99",
    "summary.convergence_s": "routing convergence (slowest fault)",
    "summary.faults_settled": "routing settled after every fault",
    "traffic.bystanders.rx_bytes": "bystander hosts received",
    "traffic.bystanders.rx_packets": "bystander hosts received (packets)",
    "integrity_ok": "integrity",
    "lossless_drops": "lossless-class drops",
    "pfc.pauses": "PFC pauses",
}
HIDDEN = ("summary.interruption_real_s",)  # shown beside its wall value instead


@dataclass
class CompareData:
    title: str
    labels: list[str]
    labs: dict[str, str]
    topologies: dict[str, str]
    dilation: dict[str, Dilation]
    fabrics: dict[str, ReportData]  # each fabric's own report data (its rates, events)
    headline: list[list[str]]  # rows, first the header
    tables: dict[str, list[list[str]]] = field(default_factory=dict)  # name -> rows
    spine_bytes: dict[str, dict[str, float]] = field(default_factory=dict)  # label -> spine -> B
    spine_rates: dict[str, dict[str, list[tuple[float, float]]]] = field(default_factory=dict)
    interruption: dict[str, dict[str, float | None]] = field(default_factory=dict)  # label -> flow
    interruption_key: str = SAMPLED  # the flows' key `interruption` holds (engine_figure)

    @property
    def plots(self) -> dict[str, tuple[str, str]]:
        """COMPARE_PLOTS, the interruption chart's caption saying which figure it shows."""
        if self.interruption_key == SAMPLED:
            return dict(COMPARE_PLOTS)
        return COMPARE_PLOTS | {"compare_interruption.png": ENGINE_INTERRUPTION}


def load(results: dict[str, Any]) -> CompareData:
    fabrics = results["fabrics"]
    labels = list(fabrics)
    dil = {lb: Dilation(fabrics[lb].get("dilation") or 1.0) for lb in labels}
    d = CompareData(
        title=f"{results['name']}: {' vs '.join(labels)}", labels=labels,
        labs={lb: fabrics[lb].get("lab", "?") for lb in labels},
        topologies=dict(results.get("topologies", {})), dilation=dil,
        fabrics={lb: data_mod.load(fabrics[lb]) for lb in labels}, headline=[])
    d.interruption_key = ENGINE if engine_figure(fabrics) else SAMPLED
    rows = _shown(results.get("compare", {}), d.interruption_key)
    head = [""] + [f"{lb} ({d.labs[lb]})" for lb in labels]
    d.headline = [head] + [_row(metric, rows[metric], labels, dil, fabrics) for metric in rows
                           if _section(metric) == "headline"]
    flows = [_row(m, rows[m], labels, dil, fabrics) for m in rows if _section(m) == "flows"]
    if flows:
        d.tables["flows"] = [head] + flows
    faults = [_row(m, rows[m], labels, dil, fabrics) for m in rows if _section(m) == "faults"]
    if faults:
        d.tables["faults"] = [head] + faults
    if expectations := results.get("expectations"):
        d.tables["expectations"] = [["expect", "result", "value"]] + [
            [e["expect"], "ok" if e["ok"] else "FAILED", e["problem"] or ", ".join(
                f"{k} = {_short(v)}" for k, v in list(e["values"].items())[:4])]
            for e in expectations]
    for lb in labels:
        t = fabrics[lb].get("traffic") or {}
        d.spine_bytes[lb] = {s: float(b) for s, b in (t.get("spine_bytes") or {}).items()}
        cumulative = spine_series(d.spine_bytes[lb], t.get("series") or {})
        d.spine_rates[lb] = {s: rates([(0.0, 0.0)] + [(float(a), float(b)) for a, b in c])
                             for s, c in cumulative.items()}
        d.interruption[lb] = {f["name"]: f.get(d.interruption_key) for f in fabrics[lb]["flows"]}
    return d


def engine_figure(fabrics: dict[str, Any]) -> bool:
    """Does this comparison show the engine's `longest_interruption_s` rather than the
    sampled `interruption_s`? A transport comparison (a flow runs MRC on some fabric)
    where every flow has it. The sampled figure's last gap runs from the last progress
    report to the transfer call's return, through the integrity check (both engines
    hash the whole region after the data: 0.55-0.71 s in all for 128 MiB flows on the
    2-core machine), far longer than MRC's gaps of 5-30 ms; a comparison without MRC
    (L2 vs L3: STP's seconds) keeps it (docs/mrc.md "How to read a comparison's report")."""
    flows = [f for r in fabrics.values() for f in r.get("flows", [])]
    return any(f.get("transport") == "mrc" for f in flows) and all(
        f.get(ENGINE) is not None for f in flows)


def _shown(rows: dict[str, dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    """The rows the report shows: with the engine's figure, each sampled interruption row
    (summary, per flow) shows the engine's in its place, and that row no more itself."""
    if key == SAMPLED:
        return rows
    out = {}
    for metric, by_label in rows.items():
        if metric.endswith(f".{ENGINE}"):
            continue
        swapped = metric.removesuffix(SAMPLED) + ENGINE if metric.endswith(f".{SAMPLED}") else metric
        if swapped in rows:
            metric, by_label = swapped, rows[swapped]
        out[metric] = by_label
    return out


def _section(metric: str) -> str:
    if metric in HIDDEN:
        return ""
    if metric.startswith("flows."):
        return "flows"
    if metric.startswith("events."):
        return "faults"
    return "headline"


def _row(metric: str, by_label: dict[str, Any], labels: list[str], dil: dict[str, Dilation],
         fabrics: dict[str, Any]) -> list[str]:
    return [label_of(metric, fabrics)] + [fmt(metric, by_label.get(lb), dil[lb]) for lb in labels]


def label_of(metric: str, fabrics: dict[str, Any]) -> str:
    """A row's label: LABELS, or one made from the metric's path."""
    if metric in LABELS:
        return LABELS[metric]
    parts = metric.split(".")
    if metric.startswith("traffic.spine_bytes."):
        return f"{parts[-1]} sent"
    if metric.startswith("traffic.rail_bytes."):
        return f"rail {parts[-1]} sent (host NICs)"
    if parts[0] == "flows":
        what = {"goodput_bps": "goodput", "fct_s": "FCT", "interruption_s": "interruption",
                "longest_interruption_s": "interruption (engine)",
                "rx_gap_s": "longest receive gap (engine, per QP)", "handoff_p50_s":
                "handoff p50", "handoff_p99_s": "handoff p99"}.get(parts[-1], parts[-1])
        return f"{'.'.join(parts[1:-1])} {what}"
    if parts[0] == "events" and len(parts) > 1 and parts[1].isdigit():
        return f"{_event(fabrics, int(parts[1]))}: {parts[-1].removesuffix('_s')}"
    if parts[0] == "measured":
        return ".".join(parts[1:])
    return metric


def _event(fabrics: dict[str, Any], i: int) -> str:
    for r in fabrics.values():
        events = r.get("events", [])
        if i < len(events):
            e = events[i]
            what = e.get("name") or e.get("target") or ""
            return f"t={e['t_s']:.1f} s {e['kind']} {e.get('action', '')} {what}".replace("  ", " ")
    return f"event {i}"


def fmt(metric: str, v: Any, dilation: Dilation) -> str:
    """One cell: rates in Mbit/s, durations in s, bytes in KB/MB, with real-equivalents at D > 1."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return ("ok" if v else "FAILED") if metric.endswith("integrity_ok") else ("yes" if v else "no")
    if not isinstance(v, (int, float)):
        return str(v)
    last = metric.rsplit(".", 1)[-1]
    if last.endswith("_bps"):
        real = f" ({dilation.real_bps(v) / 1e9:.1f} Gbit/s real)" if dilation > 1 else ""
        return f"{v / 1e6:.1f} Mbit/s{real}"
    if last.endswith("_s"):
        real = f" ({data_mod._duration(dilation.real_s(v))} real)" if dilation > 1 else ""
        return f"{v:.3f} s{real}"
    if "bytes" in last or metric.startswith(("traffic.spine_bytes.", "traffic.rail_bytes.")):
        return _bytes(v)
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _bytes(n: float) -> str:
    if n >= 1e6:
        return f"{n / 1e6:.1f} MB"
    if n >= 1e3:
        return f"{n / 1e3:.1f} KB"
    return f"{int(n)} B"


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def markdown(d: CompareData) -> str:
    from .markdown import _table

    lines = [f"# {d.title}", ""]
    lines += ["The same flows and actions on each fabric in turn: "
              + ", ".join(f"`{lb}` = lab {d.labs[lb]} ({d.topologies.get(lb, '?')})"
                          for lb in d.labels) + ".", ""]
    if any(x > 1 for x in d.dilation.values()):
        lines += ["Durations are wall time; real-equivalent = wall / D.", ""]
    lines += _table(d.headline)
    for name, rows in d.tables.items():
        lines += ["", f"## {name[:1].upper() + name[1:]}", ""] + _table(rows)
    lines += ["", "## Pictures", ""]
    for name, (title, what) in d.plots.items():
        lines += [f"![{title}: {what}]({name})", ""]
    lines += ["## Each fabric", ""] + [
        f"- `{lb}`: [{lb}/report.md]({lb}/report.md) ([html]({lb}/report.html))"
        for lb in d.labels]
    return "\n".join(lines).rstrip() + "\n"


def html_page(d: CompareData, out: Path) -> str:
    import html

    from .html import CSS, _table, plots_and_tables

    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(d.title)}"
             f"</title><style>{CSS}</style></head><body>", f"<h1>{html.escape(d.title)}</h1>",
             "<p class='note'>The same flows and actions on each fabric in turn: " + ", ".join(
                 f"<b>{html.escape(lb)}</b> = lab {html.escape(d.labs[lb])} "
                 f"({html.escape(d.topologies.get(lb, '?'))})" for lb in d.labels) + ".</p>"]
    if any(x > 1 for x in d.dilation.values()):
        parts.append("<p class='note'>Durations are wall time; real-equivalent = wall / D.</p>")
    parts.append(_table(d.headline, "headline"))
    parts += plots_and_tables(out, d.plots, d.tables)
    parts.append("<h2>Each fabric</h2><ul>" + "".join(
        f"<li><a href='{html.escape(lb)}/report.html'>{html.escape(lb)}</a>: the full report "
        f"of lab {html.escape(d.labs[lb])}</li>" for lb in d.labels) + "</ul>")
    parts.append("</body></html>\n")
    return "".join(parts)
