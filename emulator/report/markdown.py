"""report.md: the headline numbers, tables and the pictures beside it."""

from __future__ import annotations

from .data import PLOTS, ReportData, drop_empty


def _table(rows: list[list[str]]) -> list[str]:
    head, *body = rows
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + [
        "| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in body]


def headline_rows(d: ReportData) -> list[list[str]]:
    return drop_empty([["", "value", "real-equivalent, note"]] +
                      [[h.label, h.value, h.real] for h in d.headline])


def render(d: ReportData, topology: str | None = "topology.png") -> str:
    lines = [f"# {d.title}", ""]
    if d.dilation > 1:
        lines += [f"Durations are wall time; real-equivalent = wall / D (D = {d.dilation:g}).", ""]
    lines += _table(headline_rows(d))
    if d.replay:
        from .replay import markdown_lines

        lines += markdown_lines(d.replay)
    for name, rows in d.tables.items():
        lines += ["", f"## {name[:1].upper() + name[1:]}", ""] + _table(rows)
    if d.events:
        lines += ["", "## Events", ""] + _table(_events(d))
    lines += ["", "## Pictures", ""]
    if topology:
        lines += [f"![topology, hottest links coloured]({topology})", ""]
    for name, (title, what) in PLOTS.items():
        lines += [f"![{title}: {what}]({name})", ""]
    return "\n".join(lines).rstrip() + "\n"


def _events(d: ReportData) -> list[list[str]]:
    rows = [["t (s)", "action", "detail", "detect", "converged"]]
    for e in d.events:
        conv = e.get("convergence") or {}
        detail = e.get("name") or e.get("target") or ", ".join(
            f"{k}={v}" for k, v in e.items() if k in ("node", "host", "enabled", "profile"))
        rows.append([f"{e['t_s']:.3f}", f"{e['kind']} {e.get('action', '')}".strip(), str(detail),
                     _s(conv.get("detect_s")), _s(conv.get("converge_s"))])
    return rows


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f} s"
