from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from .. import lab, report
from ..experiment import analysis, compare, runner
from ..experiment.spec import load_fabrics
from ..units import Dilation
from .names import LAB
from .options import writable_out
from .progress import interrupt_on_sigterm, progress


@click.command("run")
@click.argument("experiment", type=click.Path(dir_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False), callback=writable_out,
              help="Directory for results.json (and the report).")
@click.option("--keep", is_flag=True, help="Leave the lab up if this run brought it up "
              "(with `fabrics:`, the last fabric's).")
@click.option("--name", type=LAB, help="Lab name (default: the experiment's `lab:`, else the topology's); "
              "with `fabrics:` a prefix: each fabric's lab is NAME-LABEL.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the results (results.json's content) instead of the tables.")
def command(experiment: str, out: str, keep: bool, name: str | None, as_json: bool) -> None:
    """Run an experiment: topology + flows + timed actions -> results.

    Exits 8 if a flow failed, 9 if data arrived corrupted, 11 if an `expect:`
    line failed or the lossless class dropped packets (0 otherwise).

    An experiment with `fabrics:` (label -> topology) runs the same flows and actions
    on each fabric in turn and writes one results.json and report comparing them.

    Example: rocelab run experiments/incast.yaml --out out/incast
    """
    lab.require_root()
    interrupt_on_sigterm()  # a killed run still takes its labs down
    if load_fabrics(experiment)[0].fabrics is not None:
        _compare(experiment, out, keep, name, as_json)
        return
    with progress(f"run {experiment}") as update:
        res, plan = runner.run(experiment, keep=keep, name=name, progress=update)
        update(f"writing the report into {out}")
        report.save(Path(out), res, plan)
    _finish(res, *analysis.verdict(res), as_json, lambda: _print(res, out))


def _compare(experiment: str, out: str, keep: bool, name: str | None, as_json: bool) -> None:
    with progress(f"run {experiment}") as update:
        res, plans = runner.run_compare(experiment, keep=keep, name=name, progress=update)
        update(f"writing the report into {out}")
        report.save_compare(Path(out), res, plans)
    _finish(res, *compare.verdict(res), as_json, lambda: _print_compare(res, out))


def _finish(res: Any, code: int, why: str, as_json: bool, show: Callable[[], None]) -> None:
    """Print the results (JSON, or the table and why it failed) and exit with the verdict."""
    if as_json:
        click.echo(json.dumps(res, indent=1))
    else:
        show()
        if code:
            Console().print(f"[red]{why}[/]", soft_wrap=True)
    if code:
        sys.exit(code)


def _print_compare(res: compare.CompareResults, out: str) -> None:
    """The compare rows a reader looks at first (every row is in results.json and the report)."""
    from ..report.compare import HIDDEN, fmt, label_of

    console = Console()
    labels = list(res["fabrics"])
    fabrics = dict(res["fabrics"])
    dilation = {label: Dilation(fabrics[label].get("dilation") or 1.0) for label in labels}
    table = Table(title=f"{res['name']}: {' vs '.join(labels)}")
    table.add_column("")
    for label in labels:
        table.add_column(f"{label} ({fabrics[label]['lab']})", justify="right")
    for metric, by_label in res["compare"].items():
        if metric in HIDDEN or metric.endswith((".fct_s", ".rx_gap_s", ".detect_s")):
            continue
        table.add_row(label_of(metric, fabrics),
                      *(fmt(metric, by_label.get(label), dilation[label]) for label in labels))
    console.print(table)
    for e in res["expectations"]:
        shown = ", ".join(f"{k} = {_value(v)}" for k, v in list(e["values"].items())[:4])
        mark = "[green]ok[/]  " if e["ok"] else "[red]FAIL[/]"
        console.print(f"expect {mark} {e['expect']}: {e['problem'] or shown}", soft_wrap=True)
    console.print(f"results: {Path(out) / 'results.json'}")


def _print(res: analysis.Results, out: str) -> None:
    console = Console()
    d = Dilation(res["dilation"])
    links = f"links {res['link_rate_bps'] / 1e6:g} Mbit/s, D={d:g}" if res["link_rate_bps"] else "unshaped"
    table = Table(title=f"{res['experiment']} ({links})")
    for col in ("flow", "src->dst", "FCT s", "real-equiv", "Mbit/s", "real Gbit/s", "CNPs", "retx",
                "integrity"):
        table.add_column(col)
    for f in res["flows"]:
        fct = f"{f['fct_s']:.2f}" if f["fct_s"] else "-"
        real = f"{f['fct_real_s'] * 1e3:.3f} ms" if f["fct_real_s"] else "-"
        rate = f"{f['goodput_bps'] / 1e6:.1f}" if f["goodput_bps"] else "-"
        real_rate = f"{d.real_bps(f['goodput_bps']) / 1e9:.1f}" if f["goodput_bps"] else "-"
        table.add_row(f["name"], f"{f['src']}->{f['dst']}", fct, real, rate, real_rate, str(f["cnps_rx"]),
                      str(f["retransmitted_packets"]),
                      "ok" if f["integrity_ok"] else f"[red]{f['error'] or 'FAILED'}[/]")
    console.print(table)
    s, p = res["steady"], res["pfc"]
    line = (f"steady state {s['from_s']:.1f}-{s['to_s']:.1f} s: Jain {s['jain']:.3f}"
            if s["jain"] is not None else "no common steady state (a flow ended before steady_after)")
    if res["link_rate_bps"]:
        line += f"; PFC pauses {p['pauses']}" + (
            f" (reaction p50 {p['reaction_us_p50']} us, p99 {p['reaction_us_p99']} us)"
            if p["reaction_us_p50"] is not None else "") + f"; lossless drops {res['lossless_drops']}"
    console.print(line, soft_wrap=True)
    if b := s.get("bottleneck"):
        console.print(f"bottleneck {b['node']}:{b['port']} TC {b['tc']}: {b['utilisation']:.1%} busy, "
                      f"queue p50 {b['queue_p50'] / 1e3:.0f} KB, p90 {b['queue_p90'] / 1e3:.0f} KB, "
                      f"max {b['queue_max'] / 1e3:.0f} KB", soft_wrap=True)
    for name, ph in res.get("phases", {}).items():
        rates = ", ".join(f"{f} {r / 1e6:.1f}" for f, r in ph["rates_bps"].items())
        tails = "".join(f"; {f} handoffs p50 {h['p50_s']:.3f} s, p99 {h['p99_s']:.3f} s"
                        for f, h in ph["handoffs"].items())
        console.print(f"phase {name} {ph['from_s']:.1f}-{ph['to_s']:.1f} s: {ph['pauses']} pauses; "
                      f"Mbit/s {rates}{tails}", soft_wrap=True)
    for e in res["events"]:
        conv = e.get("convergence") or {}
        extra = f", routing converged in {conv['converge_s']} s" if conv.get("converge_s") is not None else ""
        what = " ".join(str(e[k]) for k in ("node", "host", "enabled", "profile") if k in e)
        failed = f" [red]FAILED: {e['error']}[/]" if e.get("error") else ""
        console.print(f"  t={e['t_s']:.2f} s {e['kind']} {e.get('action', '')} "
                      f"{e.get('name') or e.get('target', '')}{what}{extra}{failed}", soft_wrap=True)
    for e in res["expectations"]:
        shown = ", ".join(f"{k} = {_value(v)}" for k, v in list(e["values"].items())[:4])
        mark = "[green]ok[/]  " if e["ok"] else "[red]FAIL[/]"
        console.print(f"expect {mark} {e['expect']}: {e['problem'] or shown}", soft_wrap=True)
    console.print(f"results: {Path(out) / 'results.json'}")


def _value(v: object) -> str:
    """A results value as JSON writes it: true/false/null, floats to 4 significant digits."""
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    return f"{v:.4g}" if isinstance(v, float) else str(v)
