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


# A short mrc-vs-rc-failure run (one flow, 128 MiB at 200 Mbit/s; leaf3-spine1 fails by
# carrier loss once 16 MiB are sent, heals at 12 s), trimmed: no evidence, no traffic
# series, the MRC paths that carried bytes (the first 4), every 4th rate sample.
MRC_RECORDED = Path(__file__).parent / "fixtures" / "compare" / "mrc-failure-results.json"


def _drawn(monkeypatch, d: report_compare.CompareData, tmp_path: Path):
    """The axes compare_interruption draws on."""
    from emulator.report import plots

    figs: list = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figs.append(fig) or path)
    plots.compare_interruption(d, tmp_path / "compare_interruption.png")
    return figs[0].axes[0]


def test_a_transport_comparison_shows_the_engines_interruption(monkeypatch, tmp_path):
    """The sampled interruption_s (0.63 s RC, 0.71 s MRC: its last gap runs from the last
    progress report through both engines' digest of the 128 MiB to the call's return)
    is not what the expect lines compare: the chart and the rows show the engine's
    longest_interruption_s (132 ms RC, 10 ms MRC) and say so."""
    res = json.loads(MRC_RECORDED.read_text())
    flow = {lb: r["flows"][0] for lb, r in res["fabrics"].items()}
    assert flow["mrc"]["interruption_s"] > 50 * flow["mrc"]["longest_interruption_s"]
    d = report_compare.load(res)
    assert d.interruption == {"rc": {"link": 0.132165}, "mrc": {"link": 0.010004}}  # was 0.63, 0.71
    assert d.interruption_key == "longest_interruption_s"
    ax = _drawn(monkeypatch, d, tmp_path)
    assert "longest_interruption_s" in ax.get_title()
    assert sorted(round(b.get_height(), 3) for b in ax.patches) == [10.004, 132.165]  # ms
    md = report_compare.markdown(d)
    assert "(compare_interruption.png)" in md
    caption = next(line for line in md.splitlines() if "(compare_interruption.png)" in line)
    assert "longest_interruption_s" in caption and "sampled" not in caption
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in md.splitlines()
            if line.startswith("| ")}
    assert rows["interruption (longest, any flow; engine)"] == ["0.132 s", "0.010 s |"]
    assert rows["link interruption (engine)"] == ["0.132 s", "0.010 s |"]
    assert "interruption (longest, any flow)" not in rows and "link interruption" not in rows
    assert "0.713 s" not in md and "0.630 s" not in md  # the sampled figure is not shown
    assert res["compare"]["flows.link.interruption_s"] == {"rc": 0.6305, "mrc": 0.7133}  # kept


def test_a_comparison_without_mrc_or_the_engines_figure_keeps_the_sampled_one(
        recorded, monkeypatch, tmp_path):
    """L2 vs L3 (or addressing): RC on both fabrics, seconds of STP or BGP; the sampled
    interruption_s stays, even though today's RC results carry the engine's figure too.
    An MRC comparison where some flow lacks the engine's figure keeps it as well."""
    res = json.loads(json.dumps(recorded))
    for r in res["fabrics"].values():
        for f in r["flows"]:
            f |= {"transport": "rc", "longest_interruption_s": f["rx_gap_s"]}
    d = report_compare.load(res)
    assert d.interruption_key == "interruption_s"
    assert d.interruption == {"unnum": {"kv1": 0.1941, "kv2": 1.0763},
                              "num": {"kv1": 0.2005, "kv2": 0.2656}}
    ax = _drawn(monkeypatch, d, tmp_path)
    assert "sampled every 0.1 s" in ax.get_title()
    assert d.plots == report_compare.COMPARE_PLOTS
    mrc = json.loads(MRC_RECORDED.read_text())
    mrc["fabrics"]["mrc"]["flows"][0]["longest_interruption_s"] = None
    d = report_compare.load(mrc)
    assert d.interruption == {"rc": {"link": 0.6305}, "mrc": {"link": 0.7133}}
    assert ["link interruption", "0.630 s", "0.713 s"] in [
        [row[0], *row[1:]] for row in d.tables["flows"]]
