"""The run report in a real browser (headless Chromium) after real runs on the shaped lab
clos-2x4-cc: a shortened incast (experiments/incast.yaml with 8 MiB flows), and a replay
of the shipped Mooncake excerpt. Each report.html must show every plot decoded and laid
out and every table with content."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.browser import check_report

from .conftest import PREFIX, cli, make_lab

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(600)  # a lab comes up inside the first test


@pytest.fixture(scope="module")
def cc():
    yield from make_lab("topologies/clos-2x4-cc.yaml", f"{PREFIX}cc")


def short_incast(tmp_path: Path) -> Path:
    """experiments/incast.yaml with 8 MiB flows (a few seconds), everything else as shipped."""
    exp = yaml.safe_load((ROOT / "experiments" / "incast.yaml").read_text())
    exp["topology"] = str(ROOT / "topologies" / "clos-2x4-cc.yaml")
    exp["duration"], exp["steady_after"] = "30s", "1s"
    for flow in exp["flows"]:
        flow["size"] = "8MiB"
    exp["expect"] = ["flows.*.integrity_ok", "lossless_drops == 0"]
    path = tmp_path / "incast-short.yaml"
    path.write_text(yaml.safe_dump(exp))
    return path


def test_an_incast_report_renders_every_plot_and_table(cc, tmp_path):
    out = tmp_path / "out"
    cli("run", str(short_incast(tmp_path)), "--out", str(out), "--name", cc.name, timeout=240)
    results = json.loads((out / "results.json").read_text())
    assert results["integrity_ok"] and len(results["flows"]) == 4
    page = check_report(out / "report.html", min_imgs=6, min_tables=2)
    assert page.probe["headings"][0].startswith("incast")
    # every flow is in a table the browser laid out
    cells = (out / "report.html").read_text()
    assert all(f">{f['name']}<" in cells for f in results["flows"])


def test_a_replay_report_renders_every_plot_and_table(cc, tmp_path):
    out = tmp_path / "out"
    # a budget nobody meets: the table of missed requests has rows (with none it is empty)
    cli("replay", cc.name, str(ROOT / "traces" / "mooncake-conversation-excerpt.jsonl"),
        "--for", "8s", "--placement", "prefix-affinity", "--prefix-cache", "20GiB", "--op", "read",
        "--budget", "1us", "--out", str(out), timeout=300)
    results = json.loads((out / "results.json").read_text())
    assert results["kind"] == "replay"
    page = check_report(out / "report.html", min_imgs=4, min_tables=4)
    figures = {i["figure"] for i in page.imgs}
    assert {"replay-handoff-cdf", "replay-load", "replay-spine-load"} <= figures, figures
    tables = {t["id"]: t for t in page.tables}
    for tid in ("replay-verdict", "replay-paths", "replay-missed"):
        assert tid in tables and tables[tid]["rows"] >= 2, (tid, tables.get(tid))
    assert "Trace replay" in page.probe["headings"]
