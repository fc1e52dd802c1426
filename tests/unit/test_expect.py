"""An experiment's `expect:` lines against results, and how a run's exit code is chosen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.errors import ExitCode
from emulator.experiment import expect_lines
from emulator.experiment.analysis import verdict

RESULTS = {
    "lossless_drops": 0, "integrity_ok": True,
    "steady": {"jain": 0.97, "bottleneck": {"utilisation": 0.95}},
    "flows": [{"name": "p1", "integrity_ok": True, "handoff_p99_s": 1.5, "error": None},
              {"name": "p2", "integrity_ok": True, "handoff_p99_s": 2.5, "error": None}],
    "phases": {"A": {"pauses": 0}, "B": {"pauses": 212}},
}


@pytest.mark.parametrize("line, ok", [
    ("lossless_drops == 0", True),
    ("steady.jain >= 0.9", True),
    ("steady.jain > 0.99", False),
    ("flows.*.integrity_ok", True),
    ("flows.p1.handoff_p99_s < 2", True),
    ("flows.*.handoff_p99_s < 2", False),  # p2's is 2.5: every value must pass
    ("flows.1.handoff_p99_s == 2.5", True),  # by index too
    ("phases.B.pauses > phases", False),  # not a number: refused when parsed, see below
    ("phases.*.pauses >= 0", True),
    ("steady.bottleneck.utilisation != 1", True),
])
def test_lines_hold_or_not(line, ok):
    if line.endswith("> phases"):
        with pytest.raises(ValueError, match="needs a number"):
            expect_lines.parse(line)
        return
    assert expect_lines.evaluate(RESULTS, expect_lines.parse(line))["ok"] is ok


def test_a_failure_names_the_value_and_a_missing_path_says_so():
    res = expect_lines.evaluate(RESULTS, expect_lines.parse("flows.*.handoff_p99_s < 2"))
    assert res["values"] == {"flows.p1.handoff_p99_s": 1.5, "flows.p2.handoff_p99_s": 2.5}
    assert res["problem"] == "flows.p2.handoff_p99_s = 2.5"
    missing = expect_lines.evaluate(RESULTS, expect_lines.parse("flows.p9.integrity_ok"))
    assert not missing["ok"] and missing["problem"] == "no value at flows.p9"
    none = expect_lines.evaluate({"steady": {"jain": None}}, expect_lines.parse("steady.jain >= 0.9"))
    assert not none["ok"]  # no steady state in this run: not a crash, a failure


@pytest.mark.parametrize("bad", ["", "jain >=", "a b c", "x =! 1", "x < soon"])
def test_bad_lines_are_refused_saying_what_is_allowed(bad):
    with pytest.raises(ValueError, match=r"PATH \[OP VALUE\]|needs a number"):
        expect_lines.parse(bad)


def _results(**changes):
    r = json.loads(json.dumps(RESULTS)) | {"expectations": []}
    return r | changes


def test_verdict_worst_first():
    assert verdict(_results())[0] == ExitCode.OK
    failed = _results(flows=[{"name": "p1", "error": "QP over its retry limit", "integrity_ok": False}],
                      integrity_ok=False)
    assert verdict(failed) == (ExitCode.TRANSFER_FAILED, "flows failed: p1")
    corrupt = _results(flows=[{"name": "p1", "error": None, "integrity_ok": False}], integrity_ok=False)
    assert verdict(corrupt)[0] == ExitCode.INTEGRITY_FAILED
    assert verdict(_results(lossless_drops=3))[0] == ExitCode.EXPECTATION_FAILED
    missed = _results(expectations=[{"expect": "steady.jain >= 0.99", "ok": False,
                                     "problem": "steady.jain = 0.97"}])
    assert verdict(missed) == (ExitCode.EXPECTATION_FAILED, "steady.jain >= 0.99 (steady.jain = 0.97)")


def test_shipped_experiments_state_their_expectations_and_the_incast_meets_them():
    from emulator.experiment.spec import load

    exp, _ = load("experiments/incast.yaml")
    assert exp.expect
    wrote = json.loads((Path(__file__).parent / "fixtures" / "experiment" / "incast-results.json")
                       .read_text())  # a real incast run's results
    for line in exp.expect:
        assert expect_lines.evaluate(wrote, expect_lines.parse(line))["ok"], line


def test_numbers_as_python_reads_them():
    assert expect_lines.parse("flows.f1.goodput_bps > 1e15").value == 1e15
    assert expect_lines.parse("lossless_drops == 0").value == 0
    assert expect_lines.parse("steady.jain == null").value is None
