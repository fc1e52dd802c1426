"""report.html: one self-contained file (pictures inlined) a person can mail or archive."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from .data import PLOTS, ReportData
from .markdown import _events, headline_rows

CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d2330;
       max-width: 1100px; margin: 2em auto; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 1.8em; font-size: 1.2em; }
.note { color: #5b6475; margin-top: 0; }
table { border-collapse: collapse; margin: .6em 0; font-size: .92em; }
th, td { border-bottom: 1px solid #e3e6ec; padding: .35em .8em; text-align: left; }
th { background: #f4f6f9; }
.headline td:nth-child(2) { font-weight: 600; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(480px, 1fr)); gap: 1em; }
figure { margin: 0; } figure img { width: 100%; border: 1px solid #e3e6ec; border-radius: 6px; }
figcaption { color: #5b6475; font-size: .88em; }
.bad { color: #b22222; font-weight: 600; }
"""


def _img(path: Path, alt: str) -> str:
    if not path.exists():
        return f"<p class='bad'>missing picture {html.escape(path.name)}</p>"
    data = base64.b64encode(path.read_bytes()).decode()
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>"


def _table(rows: list[list[str]], cls: str = "") -> str:
    head, *body = rows
    heads = "".join(f"<th>{html.escape(c)}</th>" for c in head)
    out = [f"<table class='{cls}'><tr>{heads}</tr>"]
    for r in body:
        cells = "".join(f"<td class='{'bad' if c == 'FAILED' else ''}'>{html.escape(c)}</td>"
                        for c in r)
        out.append(f"<tr>{cells}</tr>")
    return "".join(out) + "</table>"


def plots_and_tables(out: Path, plots: dict[str, tuple[str, str]],
                     tables: dict[str, list[list[str]]]) -> list[str]:
    """The plots (a grid of captioned figures), then one titled table each."""
    parts = ["<h2>Plots</h2><div class='grid'>"]
    for name, (title, what) in plots.items():
        parts.append(f"<figure>{_img(out / name, title)}<figcaption>{html.escape(title)}: "
                     f"{html.escape(what)}</figcaption></figure>")
    parts.append("</div>")
    for name, rows in tables.items():
        parts.append(f"<h2>{html.escape(name[:1].upper() + name[1:])}</h2>" + _table(rows))
    return parts


def render(d: ReportData, out: Path) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(d.title)}"
             f"</title><style>{CSS}</style></head><body>", f"<h1>{html.escape(d.title)}</h1>"]
    if d.dilation > 1:
        parts.append(f"<p class='note'>Durations are wall time; real-equivalent = wall / D "
                     f"(D = {d.dilation:g}).</p>")
    parts.append(_table(headline_rows(d), "headline"))
    if (out / "topology.png").exists():
        parts.append("<h2>Topology</h2><figure>" + _img(out / "topology.png", "topology") +
                     "<figcaption>Links coloured by how busy they were during the run.</figcaption>"
                     "</figure>")
    if d.replay:
        from .replay import html_section

        parts.append(html_section(d.replay, out, _img))
    parts += plots_and_tables(out, PLOTS, d.tables)
    if d.events:
        parts.append("<h2>Events</h2>" + _table(_events(d)))
    parts.append("</body></html>\n")
    return "".join(parts)
