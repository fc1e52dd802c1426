"""report.html in a real browser (headless Chromium): the report of a recorded incast run
shows every plot decoded and laid out, and every table with content."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.lab import load_topology
from emulator.report import write
from emulator.report.data import PLOTS
from tests.browser import check_report

INCAST = Path(__file__).parent / "fixtures" / "report" / "incast-results.json"


@pytest.fixture(scope="module")
def plan():
    return load_topology("topologies/clos-2x4-cc.yaml", "rep")[1]


@pytest.fixture(scope="module")
def report(tmp_path_factory, plan) -> Path:
    """The recorded incast's report.html, written once (its plots are most of the cost)."""
    out = tmp_path_factory.mktemp("report")
    write(out, json.loads(INCAST.read_text()), plan)
    return out / "report.html"


def test_a_recorded_incast_report_renders_every_plot_and_table(report):
    page = check_report(report, min_imgs=len(PLOTS) + 1, min_tables=2)
    assert {i["alt"] for i in page.imgs} >= {"topology"}
    assert page.probe["headings"][0].startswith("incast")


def test_a_report_missing_a_picture_fails_the_check(report, tmp_path):
    page = tmp_path / "report.html"  # a copy, a picture of which does not decode: must not pass
    page.write_text(report.read_text().replace("base64,", "base64,AAAA", 1))
    with pytest.raises(AssertionError, match=r"'natural': \[0, 0\]"):  # not decoded
        check_report(page, min_imgs=1, min_tables=1)
