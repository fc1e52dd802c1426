"""`rocelab top`: what the live view shows, computed from two scrapes, and drawn with rich.

Pure: `view(prev, cur)` turns two scrapes (the same families Prometheus
gets) into rows with rates; `render(view)` builds the rich renderable. The
CLI only loops, reads keys and swaps frames.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ..plan import Plan
from .scrape import Scrape

Key = tuple[tuple[str, str], ...]


class Index:
    """Samples of one scrape by metric name and labels (without `lab`)."""

    def __init__(self, scrape: Scrape):
        self.at = scrape.at
        self.data: dict[str, dict[Key, float]] = {}
        for fam in scrape.families:
            self.data[fam.name] = {tuple((k, v) for k, v in labels.items() if k != "lab"): value
                                   for labels, value in fam.samples}

    def get(self, name: str) -> dict[Key, float]:
        return self.data.get(name, {})

    def by(self, name: str, *keys: str) -> dict[tuple[str, ...], float]:
        """Sum over every label but `keys`."""
        out: dict[tuple[str, ...], float] = defaultdict(float)
        for labels, value in self.get(name).items():
            d = dict(labels)
            out[tuple(d.get(k, "") for k in keys)] += value
        return dict(out)


def _rate(prev: Index | None, cur: Index, name: str, *keys: str) -> dict[tuple[str, ...], float]:
    now = cur.by(name, *keys)
    if prev is None or cur.at <= prev.at:
        return {}
    before = prev.by(name, *keys)
    return {k: max(0.0, v - before.get(k, v)) / (cur.at - prev.at) for k, v in now.items()}


@dataclass
class PortRow:
    node: str
    port: str
    queue_bytes: float
    max_queue_bytes: float
    tx_bps: float | None
    marks_per_s: float | None
    pauses_per_s: float | None
    drops: float
    trims: float = 0.0  # packets trimmed at this egress (every class), since the lab came up


@dataclass
class TransferRow:
    src: str
    dst: str
    done: float
    total: float
    bps: float | None


@dataclass
class View:
    lab: str
    title: str
    scrape_ms: float
    failed: list[str]
    ports: list[PortRow]
    sessions_up: int
    sessions: int
    down: list[str]
    ecmp: list[str]  # routers below their expected ECMP width
    transfers: list[TransferRow] = field(default_factory=list)
    qps: list[tuple[str, str, float, float]] = field(default_factory=list)  # node, qp, rate, alpha
    trimming: bool = False  # the lab trims: the ports table has a trims column


def view(plan: Plan, prev: Scrape | None, cur: Scrape, rows: int = 10) -> View:
    p, c = (Index(prev) if prev else None), Index(cur)
    failed = [dict(k)["collector"] for k, v in c.get("rocelab_scrape_collector_success").items()
              if not v]
    sessions = c.by("rocelab_bgp_sessions_configured", "node")
    up = c.by("rocelab_bgp_sessions_established", "node")
    down = sorted(f"{dict(k)['node']}:{dict(k)['port']}"
                  for k, v in c.get("rocelab_bgp_session_up").items() if not v)
    expected = c.by("rocelab_bgp_ecmp_expected_paths", "node")
    ecmp = [f"{n} {int(w)}/{int(expected.get((n,), 0))}"
            for (n,), w in c.by("rocelab_bgp_ecmp_min_paths", "node").items()
            if w < expected.get((n,), 0)]
    return View(plan.lab, _title(plan), cur.seconds * 1e3, failed, _ports(p, c, rows),
                int(sum(up.values())), int(sum(sessions.values())), down, ecmp,
                _transfers(p, c), _qps(c),
                trimming=bool(plan.congestion and plan.congestion.trim))


def _title(plan: Plan) -> str:
    shape = f"{plan.shape()}, {len(plan.hosts)} hosts"
    cp = plan.congestion
    speed = f"{plan.speed_bps / 1e9:g}G"
    links = f"{speed} links at {cp.rate_bps / 1e6:g} Mbit/s (D={cp.dilation:g})" if cp else \
        f"{speed} links, unshaped"
    return f"lab {plan.lab}: {shape}, {links}"


def _ports(p: Index | None, c: Index, rows: int) -> list[PortRow]:
    """Queue depth is the kernel's (root qdisc backlog); the high-water mark the BPF
    dataplane's, on the data classes (TC 6 also carries multicast control frames,
    which its egress/ingress accounting cannot pair). Drops are queue and send
    drops: a veth's rx_dropped also counts the PFC frames no stack consumes."""
    k = ("node", "port")
    queue = c.by("rocelab_qdisc_backlog_bytes", *k)
    maxq: dict[tuple[str, ...], float] = defaultdict(float)
    for key, v in c.get("rocelab_dataplane_queued_max_bytes").items():
        d = dict(key)
        if d["tc"] != "6":
            maxq[(d["node"], d["port"])] = max(maxq[(d["node"], d["port"])], v)
    tx = _rate(p, c, "rocelab_interface_tx_bytes_total", *k)
    marks = _rate(p, c, "rocelab_dataplane_ce_marked_packets_total", *k)
    pauses = _rate(p, c, "rocelab_dataplane_pause_tx_frames_total", *k)
    drops = c.by("rocelab_qdisc_dropped_packets_total", *k)
    for port, v in c.by("rocelab_interface_tx_dropped_packets_total", *k).items():
        drops[port] = drops.get(port, 0.0) + v
    trims = c.by("rocelab_port_trim_packets_total", *k)
    out = [PortRow(n, port, queue.get((n, port), 0.0), maxq.get((n, port), 0.0),
                   tx.get((n, port), 0.0) * 8 if p else None,
                   marks.get((n, port)) if p and marks else None,
                   pauses.get((n, port)) if p and pauses else None, drops.get((n, port), 0.0),
                   trims.get((n, port), 0.0))
           for n, port in c.by("rocelab_interface_tx_bytes_total", *k)]
    out.sort(key=lambda r: (-r.queue_bytes, -(r.tx_bps or 0), -r.drops, r.node, r.port))
    return out[:rows]


def _transfers(p: Index | None, c: Index) -> list[TransferRow]:
    done = c.get("rocelab_engine_transfer_done_bytes")
    size = c.get("rocelab_engine_transfer_size_bytes")
    before = p.get("rocelab_engine_transfer_done_bytes") if p else {}
    out = []
    for key, value in sorted(done.items()):
        d = dict(key)
        bps = (value - before[key]) * 8 / (c.at - p.at) if p and key in before and c.at > p.at \
            else None
        out.append(TransferRow(d["node"], d["peer"], value, size.get(key, 0.0), bps))
    return out


def _qps(c: Index) -> list[tuple[str, str, float, float]]:
    alpha = c.get("rocelab_qp_dcqcn_alpha_ratio")
    rates = c.get("rocelab_qp_dcqcn_rate_bits_per_second")
    out = [(dict(k)["node"], dict(k)["qp"], v, alpha.get(k, 0.0)) for k, v in rates.items()]
    return sorted(out, key=lambda q: q[2])[:8]  # the most throttled first


# -- rendering -------------------------------------------------------------------


def _bytes(v: float) -> str:
    for unit, scale in (("MB", 1e6), ("KB", 1e3)):
        if v >= scale:
            return f"{v / scale:.1f} {unit}"
    return f"{v:.0f} B"


def _opt(v: float | None, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def render(v: View) -> RenderableType:
    head = Table.grid(expand=True)
    head.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
    head.add_column(justify="right", no_wrap=True)
    status = Text(f"scrape {v.scrape_ms:.0f} ms  q quits")
    if v.failed:
        status = Text(f"failing: {', '.join(v.failed)}  ", style="red") + status
    head.add_row(Text(f"rocelab top  {v.title}", style="bold"), status)
    return Group(head, _ports_table(v), _bgp_panel(v), _transfers_panel(v))


def _ports_table(v: View) -> Table:
    table = Table(title="hottest ports (by queue depth)", expand=True, title_justify="left")
    cols = ("port", "queue", "peak queue", "Mbit/s out", "marks/s", "pauses/s", "drops")
    for col in cols + (("trims",) if v.trimming else ()):
        table.add_column(col, justify="left" if col == "port" else "right")
    for r in v.ports:
        cells: list[str | Text] = [f"{r.node}:{r.port}", _bytes(r.queue_bytes),
                                   _bytes(r.max_queue_bytes),
                                   _opt(None if r.tx_bps is None else r.tx_bps / 1e6, "{:.1f}"),
                                   _opt(r.marks_per_s, "{:.0f}"), _opt(r.pauses_per_s, "{:.0f}"),
                                   Text(f"{r.drops:.0f}", style="red" if r.drops else "")]
        if v.trimming:
            cells.append(Text(f"{r.trims:.0f}", style="yellow" if r.trims else ""))
        table.add_row(*cells)
    return table


def _bgp_panel(v: View) -> Panel:
    ok = not v.down and not v.ecmp
    text = Text(f"BGP sessions {v.sessions_up}/{v.sessions} established",
                style="green" if ok else "red")
    if v.down:
        text.append(f"; down: {', '.join(v.down)}", style="red")
    if v.ecmp:
        text.append(f"; ECMP below full: {', '.join(v.ecmp)}", style="yellow")
    return Panel(text, title="routing", title_align="left")


def _transfers_panel(v: View) -> Panel:
    if not v.transfers:
        return Panel(Text("no transfers in flight", style="dim"), title="transfers",
                     title_align="left")
    table = Table.grid(padding=(0, 2), expand=True)
    for _ in range(4):
        table.add_column()
    for t in v.transfers:
        pct = 100 * t.done / t.total if t.total else 0.0
        rate = _opt(None if t.bps is None else t.bps / 1e6, "{:.1f} Mbit/s")
        table.add_row(f"{t.src} -> {t.dst}", ProgressBar(total=t.total or 1, completed=t.done),
                      f"{pct:5.1f}% of {_bytes(t.total)}", rate)
    for n, q, qp_bps, alpha in v.qps[:3]:
        table.add_row(Text(f"  DCQCN {n} QP {q}", style="dim"), "",
                      Text(f"rate {qp_bps / 1e6:.2f} Mbit/s", style="dim"),
                      Text(f"alpha {alpha:.2f}", style="dim"))
    return Panel(table, title=f"transfers ({len(v.transfers)} in flight)", title_align="left")
