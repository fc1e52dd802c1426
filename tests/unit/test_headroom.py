"""Dilation headroom and calibration, without a lab: what "holds" means, the ladder search
with a fake runner, the record `up` reads and the warning it prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator import calibration
from emulator.errors import RocelabError
from emulator.experiment import headroom
from emulator.experiment.spec import load

ROOT = Path(__file__).resolve().parents[2]


def fig(rate="100M", util=0.97, jain=0.999, p90=290e3, qmax=400e3, pauses=0, drops=0,
        expect_ok=True) -> headroom.Figures:
    bps = {"100M": 10**8, "200M": 2 * 10**8, "400M": 4 * 10**8, "1G": 10**9}.get(rate, 10**8)
    return headroom.Figures(rate, bps, 4e11 / bps, jain, util, 60e3, p90, qmax, pauses,
                            drops, {"steady.bottleneck.utilisation >= 0.9": expect_ok})


def test_figures_come_from_a_runs_results():
    results = {"dilation": 1000.0, "lossless_drops": 0, "pfc": {"pauses": 3},
               "steady": {"jain": 0.99, "bottleneck": {"utilisation": 0.879, "queue_p50": 0,
                                                       "queue_p90": 10, "queue_max": 2.7e6}},
               "expectations": [{"expect": "steady.jain >= 0.9", "ok": True}],
               "flows": [{"start_s": 0.2, "end_s": 14.0}, {"start_s": 0.2, "end_s": 15.2}]}
    f = headroom.figures("400M", results)
    assert (f.rate_bps, f.dilation, f.utilisation, f.queue_max, f.pauses, f.drops, f.wall_s) == (
        4 * 10**8, 1000.0, 0.879, 2.7e6, 3, 0, 15.0)
    assert f.real_per_wall == pytest.approx(0.001)
    assert f.to_json()["real_per_wall"] == 0.001


def test_the_issues_400M_run_holds_and_its_1G_run_breaks():
    base = fig()
    assert headroom.problems(base) == []
    assert headroom.problems(fig("400M", util=0.973, p90=282e3, qmax=366e3), base) == []
    broke = headroom.problems(fig("1G", util=0.879, p90=1.9e6, qmax=2.7e6, pauses=3,
                                  expect_ok=False), base)
    assert [p.split(" ")[0] for p in broke] == ["expect", "bottleneck", "queue_p90", "queue_max",
                                                "3"]


@pytest.mark.parametrize("kw, word", [({"util": 0.92}, "bottleneck"), ({"jain": 0.9}, "Jain"),
                                      ({"drops": 1}, "drops"), ({"drops": None}, "drops"),
                                      ({"util": None}, "bottleneck"), ({"pauses": 3}, "pauses"),
                                      ({"qmax": 1e6}, "queue_max"), ({"expect_ok": False}, "expect")])
def test_each_criterion_can_break_a_rate(kw, word):
    assert any(word in p for p in headroom.problems(fig("200M", **kw), fig()))


def test_the_ladder_stops_at_the_first_rate_that_breaks():
    seen = []

    def measure(rate):
        seen.append(rate)
        return fig(rate, util=0.5 if rate == "400M" else 0.97)
    found = headroom.search(["400M", "100M", "1G", "200M"], measure)
    assert seen == ["100M", "200M", "400M"]  # lowest first; 1G never run
    assert found.holds is not None and found.holds.figures.rate == "200M"
    out = found.to_json()
    assert (out["holds_rate"], out["holds_bps"], out["dilation"]) == ("200M", 2 * 10**8, 2000.0)
    assert [r["holds"] for r in out["rates"]] == [True, True, False]


def test_the_bench_runs_every_rate_and_a_recovery_above_a_break_does_not_count():
    found = headroom.search(["100M", "200M", "400M"], lambda r: fig(r, util=0.5 if r == "200M" else 0.97),
                            stop_at_break=False)
    assert [r.holds for r in found.rungs] == [True, False, True]
    assert found.holds is not None and found.holds.figures.rate == "100M"


def test_the_baseline_is_the_lowest_rate_of_the_same_run():
    base = fig("100M", p90=100e3, qmax=120e3)  # a quiet baseline: the next one's 500 KB is far
    found = headroom.search(["100M", "200M"], lambda r: base if r == "100M" else fig(r, qmax=500e3))
    assert "queue_max" in found.rungs[1].problems[0]


def test_when_the_lowest_rate_breaks_nothing_holds():
    found = headroom.search(["100M", "200M"], lambda r: fig(r, drops=5))
    assert found.holds is None and len(found.rungs) == 1
    assert found.to_json()["holds_rate"] is None


@pytest.mark.parametrize("rates, words", [(["100M", "fast"], ["--rates", "'fast'"]),
                                          (["0M"], ["--rates", "greater than zero"]),
                                          (["100M", "20M"], ["--rates", "20M is below 100M"]),
                                          ([" ", ""], ["--rates", "at least one"]),
                                          (["100M", "100000K"], ["--rates", "twice"])])
def test_bad_rates_are_one_line_naming_the_option(rates, words):
    with pytest.raises(RocelabError) as e:
        headroom.check_rates(rates)
    assert all(w in str(e.value) for w in words) and "\n" not in str(e.value)


def test_the_incast_is_scaled_with_the_rate():
    exp, _ = load(ROOT / "experiments" / "incast.yaml")
    four = headroom.scaled(exp, "400M")
    assert [f.size for f in four.flows] == [f"{4 * 40 * 2**20}B"] * 4
    assert four.duration == exp.duration and four.steady_after == exp.steady_after


# -- the record and `up`'s warning --------------------------------------------------------


def record(bps=4 * 10**8, rate="400M") -> calibration.Record:
    return calibration.Record(bps, rate, "2026-11-27T16:00:00Z")


def test_a_lab_shaped_above_what_the_machine_held_is_warned_about():
    line = calibration.advice("cc", 10**9, 400.0, record(), hinted=True)
    assert line is not None and line.startswith("warning: lab cc shapes links at 1000 Mbit/s (D = 400)")
    assert "400 Mbit/s" in line and "max_link_rate: 400M" in line and "\n" not in line


def test_a_lab_at_or_below_the_held_rate_or_unshaped_is_not():
    assert calibration.advice("cc", 4 * 10**8, 1000.0, record(), hinted=False) is None
    assert calibration.advice("cc", 10**8, 4000.0, record(), hinted=False) is None
    assert calibration.advice("plain", None, 1.0, None, hinted=False) is None


def test_without_a_record_up_says_once_how_to_calibrate():
    line = calibration.advice("cc", 10**8, 4000.0, None, hinted=False)
    assert line is not None and "rocelab calibrate" in line
    assert calibration.advice("cc", 10**8, 4000.0, None, hinted=True) is None


def test_when_nothing_held_every_shaped_lab_is_warned_about():
    line = calibration.advice("cc", 10**7, 40000.0, record(None, None), hinted=True)
    assert line is not None and "no rate" in line


def test_the_record_round_trips_and_the_hint_is_given_once(tmp_path, monkeypatch):
    monkeypatch.setenv("ROCELAB_CALIBRATION", str(tmp_path / "cal.json"))
    assert calibration.load() is None
    assert "rocelab calibrate" in (calibration.advice_for("cc", 10**8, 4000.0) or "")
    assert calibration.advice_for("cc", 10**8, 4000.0) is None  # said once
    found = headroom.search(["100M", "400M"], lambda r: fig(r))
    path = calibration.save(found.to_json(), {"cpus": 2})
    assert json.loads(path.read_text())["machine"] == {"cpus": 2}
    assert calibration.load() == calibration.Record(4 * 10**8, "400M", calibration.load().at)
    assert "warning" in (calibration.advice_for("cc", 10**9, 400.0) or "")


def test_a_link_planted_at_the_record_or_the_hint_is_replaced_not_followed(tmp_path, monkeypatch):
    """calibrate and up run as root: the record and the hint marker go through outfile, so a
    symlink at either name is replaced, and what it pointed at is neither changed nor made."""
    decoy, elsewhere = tmp_path / "decoy", tmp_path / "elsewhere"
    decoy.write_text("precious\n")
    monkeypatch.setenv("ROCELAB_CALIBRATION", str(tmp_path / "cal.json"))
    (tmp_path / "cal.json").symlink_to(decoy)
    (tmp_path / "cal.json.hinted").symlink_to(elsewhere)  # dangling: the hint is not given yet
    assert "rocelab calibrate" in (calibration.advice_for("cc", 10**8, 4000.0) or "")
    calibration.save(headroom.search(["100M"], lambda r: fig(r)).to_json(), {"cpus": 2})
    assert decoy.read_text() == "precious\n" and not elsewhere.exists()
    assert not (tmp_path / "cal.json").is_symlink()
    assert not (tmp_path / "cal.json.hinted").is_symlink()
    assert json.loads((tmp_path / "cal.json").read_text())["machine"] == {"cpus": 2}


@pytest.mark.parametrize("text", ["{", "[]", '{"holds_bps": "fast"}', '{"holds_bps": -1}',
                                  '{"holds_bps": true}'])
def test_a_damaged_record_counts_as_none(tmp_path, monkeypatch, text):
    monkeypatch.setenv("ROCELAB_CALIBRATION", str(tmp_path / "cal.json"))
    (tmp_path / "cal.json").write_text(text)
    assert calibration.load() is None


def test_the_bench_records_a_rate_that_could_not_run_and_calibrate_stops_on_it():
    def measure(rate):
        if rate == "200M":
            raise RocelabError("lab x needs 2306 neighbour entries")
        return fig(rate)
    found = headroom.search(["100M", "200M", "400M"], measure, stop_at_break=False)
    assert [r.holds for r in found.rungs] == [True, False, True]
    assert found.rungs[1].problems == ["not run: lab x needs 2306 neighbour entries"]
    assert found.to_json()["holds_rate"] == "100M"
    with pytest.raises(RocelabError):
        headroom.search(["100M", "200M"], measure)
