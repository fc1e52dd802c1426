"""The report beside results.json: report.md, report.html, plots and the topology picture.

The work is done by emulator/report (shared with `transfer`/`kv --out`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import report
from ..plan import Plan
from ..report import data, markdown


def report_md(r: dict[str, Any]) -> str:
    """report.md's text: headline numbers (wall and real-equivalent), tables, pictures."""
    return markdown.render(data.load(r))


def write(out: Path, results: dict[str, Any], plan: Plan | None) -> list[Path]:
    """Every picture, report.md and the self-contained report.html into `out`."""
    return report.write(out, results, plan)
