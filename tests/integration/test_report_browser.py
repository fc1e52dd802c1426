"""The run report in a real browser (headless Chromium) after a real run on the shaped lab:
a shortened incast (experiments/incast.yaml with 8 MiB flows) on clos-2x4-cc. Its
report.html must show every plot decoded and laid out and every table with content."""

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
