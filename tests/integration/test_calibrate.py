"""`rocelab calibrate` on a one-rate ladder, and `up`'s advice from what it recorded.

The record goes to a file of the test's own ($ROCELAB_CALIBRATION), never the run
root's: other labs on the machine keep their own calibration."""

from __future__ import annotations

import json

import pytest

from emulator import calibration, state

from .conftest import PREFIX, cli

CC = "topologies/clos-2x4-cc.yaml"  # shaped at 100 Mbit/s


@pytest.fixture
def record(tmp_path, monkeypatch):
    path = tmp_path / "calibration.json"
    monkeypatch.setenv("ROCELAB_CALIBRATION", str(path))  # the CLI inherits it
    return path


@pytest.mark.timeout(600)
def test_calibrate_runs_a_one_rate_ladder_and_records_what_held(record):
    """One rung, for real: the incast on its own lab, the figures, the record, the exit code.
    The ladder's order (lowest first), its stop at the first break and the baseline being
    the lowest rate are tests/unit/test_headroom.py's, with a fake runner: a second real
    rung (200M) cost another lab and incast, ~20 s, and proved nothing they do not."""
    res = cli("calibrate", "--rates", "100M", "--name", f"{PREFIX}cal", "--json", check=False,
              timeout=540)
    out = json.loads(res.stdout)
    assert "error" not in out, res.stderr
    assert set(out) == {"holds_rate", "holds_bps", "dilation", "rates", "criteria", "recorded"}
    rates = out["rates"]
    assert [r["rate"] for r in rates] == ["100M"]
    assert rates[0]["dilation"] == 4000.0 and rates[0]["real_per_wall"] == pytest.approx(2.5e-4)
    for r in rates:
        assert {"jain", "utilisation", "queue_p50", "queue_p90", "queue_max", "pauses", "drops",
                "expectations", "holds", "problems", "wall_s"} <= set(r)
        assert r["holds"] == (not r["problems"]) and len(r["expectations"]) == 4
    held = [r for r in rates if r["holds"]]
    assert res.returncode == (0 if rates[0]["holds"] else 11), res.stderr
    assert out["holds_rate"] == (held[-1]["rate"] if rates[0]["holds"] else None)
    assert json.loads(record.read_text())["rates"] == rates and out["recorded"] == str(record)
    assert "rate 100M (1/1): running the incast" in res.stderr  # progress on stderr
    assert f"{PREFIX}cal" not in state.known_labs()  # each rate's lab is down again


def _up_advice(name: str) -> list[str]:
    try:
        res = cli("up", CC, "--name", name)
    finally:
        cli("down", name, check=False)
    return [ln for ln in res.stderr.splitlines() if ln.startswith(("warning:", "note:"))]


def test_up_says_once_how_to_calibrate_then_warns_above_the_recorded_rate(record):
    name = f"{PREFIX}calw"
    first = _up_advice(name)
    assert len(first) == 1 and "rocelab calibrate" in first[0], first
    assert _up_advice(name) == []  # said once
    calibration.save({"holds_rate": "40M", "holds_bps": 40_000_000, "rates": []}, {})
    warned = _up_advice(name)
    assert len(warned) == 1 and warned[0].startswith(
        f"warning: lab {name} shapes links at 100 Mbit/s (D = 4000), above the 40 Mbit/s"), warned
    # A lab within the recorded rate is not warned about: tests/unit/test_headroom.py
    # (test_a_lab_at_or_below_the_held_rate_or_unshaped_is_not), on the same advice.
