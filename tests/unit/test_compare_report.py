"""The report of a compare run from a recorded one: a column per fabric, the compare plots
drawn from the same plotting code, each fabric's own report beside it; and a one-topology
report that does not change with the keys compare runs added to every run's results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.lab import load_topology
from emulator.report import compare as report_compare
from emulator.report import data as report_data
from emulator.report import markdown, save_compare, write
from emulator.units import Dilation

RECORDED = Path(__file__).parent / "fixtures" / "compare" / "addressing-results.json"
TOPOS = Path(__file__).resolve().parents[2] / "topologies"


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(RECORDED.read_text())


@pytest.fixture(scope="module")
def written(recorded, tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    plans = {"unnum": load_topology(TOPOS / "clos-2x4.yaml", "h3-cmp-unnum")[1],
             "num": load_topology(TOPOS / "clos-2x4-numbered.yaml", "h3-cmp-num")[1]}
    return out, save_compare(out, recorded, plans)


def test_every_compare_picture_and_each_fabrics_report_are_written(written):
    from test_report import _non_trivial  # the single-run report's own picture check

    out, paths = written
    names = {p.relative_to(out).as_posix() for p in paths}
    assert set(report_compare.COMPARE_PLOTS) | {"results.json", "report.md", "report.html"} <= names
    for label in ("unnum", "num"):
        assert {f"{label}/report.md", f"{label}/flow_rates.png", f"{label}/topology.png"} <= names
    for name in report_compare.COMPARE_PLOTS:
        _non_trivial(out / name)
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == len(report_compare.COMPARE_PLOTS)
    assert "href='unnum/report.html'" in page


def test_the_headline_has_a_column_per_fabric_with_the_numbers(written):
    md = (written[0] / "report.md").read_text()
    assert md.startswith("# compare-addressing: unnum vs num\n")
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in md.splitlines()
            if line.startswith("| ")}
    assert rows[""] == ["unnum (h3-cmp-unnum)", "num (h3-cmp-num) |"]
    assert rows["goodput (all flows)"] == ["403.7 Mbit/s", "424.1 Mbit/s |"]
    assert rows["interruption (longest, any flow)"] == ["1.076 s", "0.266 s |"]
    assert rows["handoff p99"] == ["1.100 s", "0.393 s |"]
    assert rows["routing convergence (slowest fault)"] == ["0.516 s", "0.138 s |"]
    assert rows["spine2 sent"] == ["75.2 MB", "81.3 MB |"]
    assert rows["bystander hosts received"] == ["0 B", "0 B |"]
    assert rows["kv2 interruption"] == ["1.076 s", "0.266 s |"]
    assert "t=0.5 s fault fail link leaf1-spine1: converge" in rows
    for section in ("## Flows", "## Faults", "## Expectations", "## Each fabric"):
        assert section in md


@pytest.mark.parametrize("metric, value, d, shown", [
    ("summary.goodput_bps", 25e6, 4000, "25.0 Mbit/s (100.0 Gbit/s real)"),
    ("flows.a.interruption_s", 2.0, 4000, "2.000 s (500.0 us real)"),
    ("flows.a.fct_s", 2.0, 1, "2.000 s"),
    ("traffic.spine_bytes.spine1", 2_500_000, 1, "2.5 MB"),
    ("traffic.bystanders.rx_bytes", 1500, 1, "1.5 KB"),
    ("traffic.bystanders.rx_packets", 7, 1, "7"),
    ("integrity_ok", False, 1, "FAILED"),
    ("summary.faults_settled", True, 1, "yes"),
    ("measured.stp_root", "spine1", 1, "spine1"),
    ("summary.convergence_s", None, 1, "-"),
])
def test_cells_are_formatted_by_what_they_measure(metric, value, d, shown):
    assert report_compare.fmt(metric, value, Dilation(d)) == shown


def test_a_measured_number_gets_a_row_of_its_own(recorded, tmp_path):
    res = json.loads(json.dumps(recorded))
    res["fabrics"]["unnum"]["measured"] = {"stp_converge_s": 0.0}
    res["fabrics"]["num"]["measured"] = {"stp_converge_s": 6.2}
    res["compare"]["measured.stp_converge_s"] = {"unnum": 0.0, "num": 6.2}
    d = report_compare.load(res)
    assert ["stp_converge_s", "0.000 s", "6.200 s"] in d.headline


def test_one_topology_reports_do_not_change_with_the_new_keys(tmp_path):
    """summary, traffic, measured and the flows' interruption keys are in every run's
    results now; the one-topology report reads none of them."""
    from test_report import experiment

    plain = experiment()
    more = json.loads(json.dumps(plain))
    for f in more["flows"]:
        f |= {"interruption_s": 0.4, "interruption_real_s": 0.0001, "interruption_from_s": 1.0,
              "rx_gap_s": 0.01}
    more |= {"summary": {"bytes": 1, "goodput_bps": 1.0}, "measured": {"x": 1},
             "traffic": {"ports": {}, "links": {}, "spine_bytes": {"spine1": 5e6, "spine2": 1},
                         "spine_packets": {}, "bystanders": {"hosts": [], "rx_bytes": 0,
                                                             "rx_packets": 0, "by_host": {}},
                         "sample_every_s": 0.1, "series": {}}}
    a, b = report_data.load(plain), report_data.load(more)
    assert markdown.render(a) == markdown.render(b)
    assert (a.spine_bytes, a.spine_qps, a.link_load()) == (b.spine_bytes, b.spine_qps, b.link_load())
    plan = load_topology(TOPOS / "clos-2x4-cc.yaml", "rep")[1]
    write(tmp_path, more, plan)  # and it draws
    assert (tmp_path / "report.md").read_text() == markdown.render(b, "topology.png")
