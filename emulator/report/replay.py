"""A trace replay's part of the report: its tables and sections (`rocelab replay`, or an
experiment with `replay:`; the plots are replay_plots.py's). Every element carries an id,
so a browser test can find it: section#replay; figure#replay-handoff-cdf, #replay-load,
#replay-spine-load (each an <img> and a caption); table#replay-verdict, #replay-paths,
#replay-missed (class `replay` on each table)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

PLOTS = {  # file -> (element id, title, what it shows)
    "replay_handoff_cdf.png": ("replay-handoff-cdf", "Handoff CDF", "each request's handoff "
                               "(queueing + transfer), real-equivalent, and the budget"),
    "replay_load.png": ("replay-load", "Offered vs carried load",
                        "KV bytes arriving vs bytes moving, real-equivalent Gbit/s over trace time"),
    "replay_spine_load.png": ("replay-spine-load", "Load per spine and rail",
                              "real KV bytes each spine (and rail) carried"),
}
MISSED_ROWS = 50


def tables(block: dict[str, Any]) -> dict[str, list[list[str]]]:
    """id -> rows (first: header)."""
    v, s, c = block["verdict"], block["scheduler"], block["verdict"]["cache"]
    ms = lambda x: f"{x * 1e3:.2f} ms"  # noqa: E731
    tails = " / ".join(ms(v[k]) for k in ("handoff_p50_s", "handoff_p99_s", "handoff_p999_s"))
    sc = block["scale"]
    verdict = [["", "value"],
               ["requests", f"{v['requests']} ({v['failed']} failed)"],
               ["budget", ms(v["budget_s"]) + (" (the model's decode step)"
                                                if block["budget_default"] else "")],
               ["SLO attainment", f"{v['attainment']:.1%} ({v['within_budget']} within budget)"],
               ["handoff p50 / p99 / p99.9", tails],
               ["prefix cache", f"{c['hit_ratio']:.1%} of blocks hit, {c['bytes_saved'] / 1e9:.2f} GB saved"],
               ["KV bytes (real / moved on the lab)", f"{v['bytes_real']} / {v['bytes_moved']}"],
               ["scaling", f"D = {sc['dilation']:g}, time scale {sc['time_scale']:g}, "
                           f"bytes x {sc['size_factor']:.3g}"],
               ["scheduler", f"lateness p99 {ms(s['lateness_p99_s'])}, CPU {s['overhead_share']:.1%} "
                             f"of the run, {s['max_in_flight']} in flight at most"]]
    paths = [["path", "KV bytes (real)"]] + [[k, str(b)] for k, b in v["spines"].items()] + [
        [f"rail {k}", str(b)] for k, b in v["rails"].items()]
    missed = [["request", "handoff", "prefill -> decode", "bytes (real)", "why"]] + [
        [str(m["index"]), ms(m["handoff_s"]), f"{m['prefill']} -> {m['decode']}", str(m["bytes_real"]),
         "; ".join(m["why"])] for m in v["missed"][:MISSED_ROWS]]
    return {"replay-verdict": verdict, "replay-paths": paths, "replay-missed": missed}


TITLES = {"replay-verdict": "Replay verdict", "replay-paths": "Load per spine and rail",
          "replay-missed": "Requests that missed the budget (worst first)"}


def html_section(block: dict[str, Any], out: Path, img: Any) -> str:
    """section#replay: the verdict, the plots, the tables (`img(path, alt)` inlines a picture)."""
    parts = ["<section id='replay'><h2>Trace replay</h2><p class='note'>Every time in this "
             "section is real-equivalent (wall time / the replay's time scale; bytes are the "
             "trace's, the lab moved them scaled: docs/workloads.md).</p>"]
    for tid, rows in tables(block).items():
        head, *body = rows
        parts.append(f"<h3>{html.escape(TITLES[tid])}</h3><table id='{tid}' class='replay'><tr>" +
                     "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>" +
                     "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                             for r in body) + "</table>")
        if tid == "replay-verdict":
            parts.append("<div class='grid'>" + "".join(
                f"<figure id='{fid}'>{img(out / name, title)}<figcaption>{html.escape(title)}: "
                f"{html.escape(what)}</figcaption></figure>" for name, (fid, title, what) in PLOTS.items())
                + "</div>")
    return "".join(parts) + "</section>"


def markdown_lines(block: dict[str, Any]) -> list[str]:
    lines = ["", "## Trace replay", "", "Every time in this section is real-equivalent (wall time / "
             "the replay's time scale; bytes are the trace's, the lab moved them scaled).", ""]
    for tid, rows in tables(block).items():
        head, *body = rows
        lines += ["", f"### {TITLES[tid]}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in body]
    lines += [""] + [f"![{title}: {what}]({name})" for name, (_i, title, what) in PLOTS.items()]
    return lines

