"""Run reports: plots, a topology picture, report.md and a self-contained report.html.

    data.py       results.json (run, transfer, kv) -> ReportData
    plots.py      per-flow rate, queue depth, pause timeline, latency CDF, ECMP spread
    topology.py   spines, leaves, hosts and link speeds; the hottest links coloured
    markdown.py, html.py
    record.py     sampling ports while `transfer`/`kv --out` run
    compare.py    a compare run (`fabrics:`): one column per fabric, its plots in plots.py
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import outfile
from ..plan import Plan
from . import data as data_mod
from . import html, markdown


def save(out: Path, results: Mapping[str, Any], plan: Plan | None) -> list[Path]:
    """results.json, then the report beside it (every command that has `--out`)."""
    outfile.make_dir(out)
    outfile.write_text(out / "results.json", json.dumps(results, indent=1) + "\n")
    return [out / "results.json"] + write(out, results, plan)


def write(out: Path, results: Mapping[str, Any], plan: Plan | None) -> list[Path]:
    """Every picture and both reports into `out` (beside results.json); returns the paths."""
    from . import plots, topology  # matplotlib: ~1 s to import, only when drawing

    outfile.make_dir(out)
    d = data_mod.load(dict(results))
    paths = plots.draw_all(d, plan, out)
    if d.replay:
        from . import replay_plots

        paths += replay_plots.draw(d.replay, out)
    if plan is not None:
        load = d.link_load() or None
        for suffix in ("png", "svg"):
            paths.append(topology.draw(plan, out / f"topology.{suffix}", load, d.duration_s,
                                       title=d.title))
    md = out / "report.md"
    outfile.write_text(md, markdown.render(d, "topology.png" if plan is not None else None))
    page = out / "report.html"
    outfile.write_text(page, html.render(d, out))
    return paths + [md, page]


def save_compare(out: Path, results: Mapping[str, Any], plans: Mapping[str, Plan]) -> list[Path]:
    """A compare run: results.json, the compare report and its plots in `out`, and each
    fabric's own report (plots, topology, report.md/html) in `out/LABEL/`."""
    outfile.make_dir(out)
    outfile.write_text(out / "results.json", json.dumps(results, indent=1) + "\n")
    return [out / "results.json"] + write_compare(out, results, plans)


def write_compare(out: Path, results: Mapping[str, Any], plans: Mapping[str, Plan]) -> list[Path]:
    from . import compare, plots

    outfile.make_dir(out)
    paths = []
    for label, fabric in results["fabrics"].items():
        paths += write(out / label, fabric, plans.get(label))
    d = compare.load(dict(results))
    paths += plots.draw_compare(d, out)
    md = out / "report.md"
    outfile.write_text(md, compare.markdown(d))
    page = out / "report.html"
    outfile.write_text(page, compare.html_page(d, out))
    return paths + [md, page]
