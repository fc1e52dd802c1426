"""The run report's plots (matplotlib, Agg: no display needed).

Every plot is drawn even when its data is absent (an unshaped lab has no
queues to sample), saying so on the canvas: a report always has the same
five pictures, and a missing one is never a silent gap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: headless, no display, no Tk

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from .. import outfile
from ..plan import Plan  # noqa: E402
from ..plan.congestion import CNP_TC  # noqa: E402
from .data import PLOTS, ReportData  # noqa: E402

if TYPE_CHECKING:
    from .compare import CompareData

DPI = 110
SIZE = (8.0, 4.2)
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]
BUSIEST = 5  # ports in the queue-depth plot


def _figure() -> tuple[Figure, Axes]:
    fig, ax = plt.subplots(figsize=SIZE, dpi=DPI, layout="constrained")
    ax.grid(True, alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    return fig, ax


def _empty(ax: Axes, why: str) -> None:
    ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, fontsize=11,
            color="#555555", wrap=True, linespacing=1.6)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.spines[["left", "bottom"]].set_visible(False)
    ax.grid(False)


def _real_axis(ax: Axes, d: ReportData) -> None:
    """A second time axis on top in real-equivalent milliseconds (wall / D)."""
    def to_real_ms(t: Any) -> Any:  # matplotlib hands over arrays of wall seconds
        return d.dilation.real_s(t) * 1e3

    def to_wall_s(r: Any) -> Any:
        return d.dilation.wall_s(r / 1e3)

    if d.dilation > 1:
        top = ax.secondary_xaxis("top", functions=(to_real_ms, to_wall_s))
        top.set_xlabel("real-equivalent time (ms)", fontsize=9)


def _events(ax: Axes, d: ReportData) -> None:
    """The run's actions (faults, drains, ECN/DCQCN changes) as labelled vertical lines."""
    for e in d.events:
        what = " ".join(str(x) for x in (e["kind"], e.get("action", ""), e.get("name") or
                                         e.get("target") or e.get("host") or e.get("node") or "")
                        if x)
        ax.axvline(e["t_s"], color="#555555", ls="-.", lw=0.9)
        ax.annotate(what, (e["t_s"], 1.0), xycoords=("data", "axes fraction"), rotation=90,
                    va="top", ha="right", fontsize=7.5, color="#444444", xytext=(-2, -4),
                    textcoords="offset points")


def _save(fig: Figure, path: Path) -> Path:
    with outfile.open_fresh(path) as f:  # never through a link planted at the name
        fig.savefig(f, format=path.suffix[1:], dpi=DPI)
    plt.close(fig)
    return path


def flow_rates(d: ReportData, path: Path) -> Path:
    return _save(flow_rates_figure(d), path)


def flow_rates_figure(d: ReportData) -> Figure:
    """The per-flow rate plot, drawn but not saved (the caller closes it)."""
    fig, ax = _figure()
    ax.set_title("Per-flow sending rate (RoCE payload the engine put on the wire)")
    flow_rates_on(ax, d)
    return fig


def flow_rates_on(ax: Axes, d: ReportData, ymax_bps: float | None = None) -> None:
    """Each flow's rate over time on `ax`, with line rate, fair share, events and the
    real-equivalent axis; `ymax_bps`: a common scale (compare runs' panels)."""
    series = [f for f in d.flows if f.series]
    if not series:
        _empty(ax, "no rate samples (the transfer finished before the first progress report)")
        return
    peak = max(r for f in series for _, r in f.series)
    if d.link_rate_bps and peak > 1.02 * d.link_rate_bps:
        ax.text(0.01, 0.98, "above line rate: bursts (retransmissions too) queued at the "
                "sender's own port", transform=ax.transAxes, fontsize=7.5, color="#666666",
                va="top")
    for i, f in enumerate(series):
        t, r = zip(*f.series)
        ax.plot(t, [x / 1e6 for x in r], label=f"{f.name} ({f.src} -> {f.dst})",
                color=PALETTE[i % len(PALETTE)], lw=1.4)
    if d.link_rate_bps:
        ax.axhline(d.link_rate_bps / 1e6, color="black", ls="--", lw=1, label="line rate")
        if len(series) > 1:
            ax.axhline(d.link_rate_bps / 1e6 / len(series), color="grey", ls=":", lw=1,
                       label=f"fair share of one link (1/{len(series)})")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("rate (Mbit/s)")
    ax.set_ylim(0, max(peak, d.link_rate_bps or 0, ymax_bps or 0) / 1e6 * 1.15)
    ax.legend(fontsize=8, loc="upper right", ncols=2 if len(series) > 4 else 1)
    _events(ax, d)
    _real_axis(ax, d)


def queue_depth(d: ReportData, plan: Plan | None, path: Path) -> Path:
    fig, ax = _figure()
    ax.set_title(f"Switch egress queue depth, {BUSIEST} busiest ports")
    ports = [p for p in d.ports if p.get("tc") != CNP_TC and p["series"].get("queued")
             and _is_switch(plan, p["node"])]
    ports = sorted(ports, key=lambda p: -max(v for _, v in p["series"]["queued"]))[:BUSIEST]
    if not ports or max(v for p in ports for _, v in p["series"]["queued"]) <= 0:
        _empty(ax, "no queue samples: queues are sampled on labs with the congestion plane on")
        return _save(fig, path)
    for i, p in enumerate(ports):
        t, q = zip(*p["series"]["queued"])
        ax.plot(t, [max(0, x) / 1e6 for x in q], color=PALETTE[i], lw=1.3,
                label=f"{p['node']}:{p['port']} (TC {p['tc']})")
    cp = plan.congestion if plan else None
    if cp:
        for y, name, style in ((cp.kmin, "ECN Kmin", ":"), (cp.kmax, "ECN Kmax", "--")):
            ax.axhline(y / 1e6, color="#b22222", ls=style, lw=1, label=f"{name} {y / 1e6:g} MB")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("queued (MB)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="upper right")
    _events(ax, d)
    _real_axis(ax, d)
    return _save(fig, path)


def _is_switch(plan: Plan | None, node: str) -> bool:
    return plan.node(node).is_router if plan else node.startswith(("spine", "leaf"))


def pause_timeline(d: ReportData, plan: Plan | None, path: Path) -> Path:
    """One row per port that sent PFC frames: shaded while its XOFF was outstanding.

    The sampler counts pause frames per port from the run's start (XOFF and XON
    each send one), so an odd count at a sample means the upstream was paused."""
    fig, ax = _figure()
    ax.set_title("PFC pauses: upstream egress paused, per port that sent PAUSE")
    rows = [p for p in d.ports if any(v for _, v in p["series"].get("pause_tx", []))]
    if not rows:
        _empty(ax, _no_pauses(d, plan))
        return _save(fig, path)
    for i, p in enumerate(rows):
        _pause_row(ax, i, p["series"]["pause_tx"], PALETTE[i % len(PALETTE)])
    ax.set_yticks(range(len(rows)), [_pause_label(plan, p, d.paused_s) for p in rows], fontsize=8)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.invert_yaxis()
    ax.set_xlabel("wall time (s)")
    _real_axis(ax, d)
    return _save(fig, path)


def _no_pauses(d: ReportData, plan: Plan | None) -> str:
    cp = plan.congestion if plan else None
    if not cp:
        return "no PFC on this lab (unshaped links)"
    why = f"no PFC pauses in this run\nXOFF is {cp.xoff / 1e6:g} MB buffered per ingress port"
    held = [(max(v for _, v in p["series"]["buffered"]), p["node"], p["port"])
            for p in d.ports if p["series"].get("buffered")]
    if held and max(held)[0] > 0:
        most, node, port = max(held)
        why += f"\nthe most any port held during the run: {most / 1e6:.2f} MB ({node}:{port})"
    return why


def _pause_row(ax: Axes, row: int, series: list, color: str) -> None:
    spans, start = [], None
    for t, count in series:
        if count % 2 and start is None:
            start = t
        elif not count % 2 and start is not None:
            spans.append((start, t - start))
            start = None
    if start is not None:
        spans.append((start, series[-1][0] - start))
    ax.broken_barh(spans, (row - 0.35, 0.7), color=color, alpha=0.8)
    changes = [t for (t, a), (_, b) in zip(series[1:], series) if a != b]
    ax.plot(changes, [row] * len(changes), "|", color="black", ms=10, alpha=0.6)


def _pause_label(plan: Plan | None, p: dict, paused_s: dict[str, float]) -> str:
    if plan is None:
        return f"{p['node']}:{p['port']} sent PAUSE"
    port = plan.node(p["node"]).interface(p["port"])
    up = f"{port.peer}:{port.peer_ifname}"
    total = sum(v for k, v in paused_s.items() if k.startswith(up + ":"))
    return f"{up} (paused by {p['node']}" + (f", {total:.2f} s)" if total else ")")


def latency_cdf(d: ReportData, path: Path) -> Path:
    fig, ax = _figure()
    ax.set_title(f"CDF of {d.latency_label or 'completion time'}")
    values = sorted(v for v in d.latencies if v)
    if not values:
        _empty(ax, "handoffs: see the trace replay's CDF (real-equivalent)" if d.kind == "replay"
               else "no completed flows")
        return _save(fig, path)
    ys = [(i + 1) / len(values) for i in range(len(values))]
    ax.step([values[0] * 0.98] + values, [0.0] + ys, where="post", color=PALETTE[0], lw=1.8)
    ax.plot(values, ys, "o", color=PALETTE[0], ms=4)
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("fraction completed")
    ax.set_ylim(0, 1.05)
    _real_axis(ax, d)
    return _save(fig, path)


def ecmp_spread(d: ReportData, path: Path) -> Path:
    fig, ax = _figure()
    by_bytes = any(d.spine_bytes.values())
    data = {k: v / 1e6 for k, v in d.spine_bytes.items()} if by_bytes else d.spine_qps
    ax.set_title("ECMP spread: " + ("bytes each spine forwarded" if by_bytes else d.spine_counts))
    if not data:
        _empty(ax, "no per-spine data")
        return _save(fig, path)
    total = sum(data.values()) or 1
    bars = ax.bar(list(data), list(data.values()), width=0.55,
                  color=[PALETTE[i % len(PALETTE)] for i in range(len(data))])
    ax.bar_label(bars, [f"{v:.1f} MB ({v / total:.0%})" if by_bytes else f"{v:d} ({v / total:.0%})"
                        for v in data.values()], fontsize=9)
    ax.axhline(total / len(data), color="black", ls=":", lw=1, label="even split")
    ax.set_ylim(0, max(data.values()) * 1.15)
    ax.set_ylabel("MB" if by_bytes else d.spine_counts.split(" with")[0].split(" hashed")[0])
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(False)
    return _save(fig, path)


def draw_all(d: ReportData, plan: Plan | None, out: Path) -> list[Path]:
    makers: dict[str, Callable[[Path], Path]] = {
        "flow_rates.png": lambda p: flow_rates(d, p),
        "queue_depth.png": lambda p: queue_depth(d, plan, p),
        "pause_timeline.png": lambda p: pause_timeline(d, plan, p),
        "latency_cdf.png": lambda p: latency_cdf(d, p),
        "ecmp_spread.png": lambda p: ecmp_spread(d, p),
    }
    return [makers[name](out / name) for name in PLOTS]


# -- compare runs: one figure, every fabric ------------------------------------------------


def _panels(n: int) -> tuple[Figure, list[Axes]]:
    """One panel per fabric, stacked, sharing the time axis."""
    fig, axes = plt.subplots(n, 1, figsize=(SIZE[0], 1.0 + 2.6 * n), dpi=DPI, sharex=True,
                             layout="constrained", squeeze=False)
    out = [a[0] for a in axes]
    for ax in out:
        ax.grid(True, alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
    return fig, out


def compare_flow_rates(cd: CompareData, path: Path) -> Path:
    """Each fabric's flow rates on its own panel, one y scale for all."""
    fig, axes = _panels(len(cd.labels))
    fig.suptitle("Per-flow sending rate, per fabric (RoCE payload the engine put on the wire)",
                 fontsize=11)
    peak = max((r for d in cd.fabrics.values() for f in d.flows for _, r in f.series), default=0.0)
    for ax, label in zip(axes, cd.labels):
        flow_rates_on(ax, cd.fabrics[label], ymax_bps=peak)
        ax.set_title(f"{label}: lab {cd.labs[label]}", fontsize=10, loc="left")
        if ax is not axes[-1]:
            ax.set_xlabel("")
    return _save(fig, path)


def _grouped_bars(ax: Axes, groups: list[str], by_label: Mapping[str, Mapping[str, float | None]],
                  scale: float, fmt: str) -> None:
    """Bars per group (x), one per fabric, labelled with their values."""
    labels = list(by_label)
    width = 0.8 / max(1, len(labels))
    for i, label in enumerate(labels):
        xs = [g + (i - (len(labels) - 1) / 2) * width for g in range(len(groups))]
        vals = [(by_label[label].get(g) or 0.0) / scale for g in groups]
        bars = ax.bar(xs, vals, width=width * 0.92, color=PALETTE[i % len(PALETTE)], label=label)
        ax.bar_label(bars, [fmt.format(v) if by_label[label].get(g) is not None else "-"
                            for v, g in zip(vals, groups)], fontsize=8)
    ax.set_xticks(range(len(groups)), groups)
    top = max(((v or 0.0) / scale for m in by_label.values() for v in m.values()), default=0.0)
    ax.set_ylim(0, (top or 1.0) * 1.18)
    ax.legend(fontsize=8, loc="upper right", title="fabric", title_fontsize=8)
    ax.grid(False)


def compare_spine_bytes(cd: CompareData, path: Path) -> Path:
    fig, ax = _figure()
    ax.set_title("Bytes each spine sent (kernel port counters), by fabric")
    spines = list(dict.fromkeys(s for m in cd.spine_bytes.values() for s in m))
    if not spines or not any(v for m in cd.spine_bytes.values() for v in m.values()):
        _empty(ax, "no port counters recorded")
        return _save(fig, path)
    _grouped_bars(ax, spines, cd.spine_bytes, 1e6, "{:.1f} MB")
    ax.set_ylabel("MB")
    return _save(fig, path)


def compare_spine_rates(cd: CompareData, path: Path) -> Path:
    fig, axes = _panels(len(cd.labels))
    fig.suptitle("Each spine's sending rate over time (kernel port counters)", fontsize=11)
    peak = max((r for m in cd.spine_rates.values() for s in m.values() for _, r in s),
               default=0.0)
    spines = sorted({s for m in cd.spine_bytes.values() for s in m})
    for ax, label in zip(axes, cd.labels):
        ax.set_title(f"{label}: lab {cd.labs[label]}", fontsize=10, loc="left")
        series = cd.spine_rates.get(label) or {}
        if not series:
            _empty(ax, "no spine port sent more than control traffic")
            continue
        for spine, s in sorted(series.items()):
            t, r = zip(*s)
            ax.plot(t, [x / 1e6 for x in r], label=spine, lw=1.4,
                    color=PALETTE[spines.index(spine) % len(PALETTE)] if spine in spines
                    else None)
        ax.set_ylabel("Mbit/s")
        ax.set_ylim(0, peak / 1e6 * 1.15 or 1.0)
        ax.legend(fontsize=8, loc="upper right")
        _events(ax, cd.fabrics[label])
    axes[-1].set_xlabel("wall time (s)")
    return _save(fig, path)


def compare_interruption(cd: CompareData, path: Path) -> Path:
    """The engine's longest gap in placed bytes (ms) where the comparison has it
    (compare.engine_figure), else the sampled time without delivery progress (s)."""
    fig, ax = _figure()
    engine = cd.interruption_key == "longest_interruption_s"
    ax.set_title("Longest gap in placed-byte progress (engine's longest_interruption_s), "
                 "per flow and fabric" if engine else
                 "Longest time without delivery progress (sampled every 0.1 s), per flow and fabric")
    flows = list(dict.fromkeys(f for m in cd.interruption.values() for f in m))
    if not flows:
        _empty(ax, "no flows")
        return _save(fig, path)
    _grouped_bars(ax, flows, cd.interruption, 1e-3 if engine else 1.0,
                  "{:.1f} ms" if engine else "{:.2f} s")
    ax.set_ylabel("wall milliseconds" if engine else "wall seconds")
    return _save(fig, path)


def draw_compare(cd: CompareData, out: Path) -> list[Path]:
    makers: dict[str, Callable[[Path], Path]] = {
        "compare_flow_rates.png": lambda p: compare_flow_rates(cd, p),
        "compare_spine_bytes.png": lambda p: compare_spine_bytes(cd, p),
        "compare_spine_rates.png": lambda p: compare_spine_rates(cd, p),
        "compare_interruption.png": lambda p: compare_interruption(cd, p),
    }
    return [makers[name](out / name) for name in cd.plots]
