"""A compare run for real: the same flows and fault on two routed fabrics (unnumbered and
/31-numbered clos-2x4), one after the other, with a caller's measure on each."""

from __future__ import annotations

import json
import time

import pytest

from emulator import netns, report
from emulator.experiment import compare, runner

from .conftest import PREFIX, cli, leftovers

EXPERIMENT = "experiments/compare-addressing.yaml"  # the shipped example


def _namespaces(run: runner.FabricRun) -> runner.Finish:
    """A caller's measure: what it saw when the run began and ended (the lab up for both)."""
    began = time.monotonic()
    up = sorted(n for n in netns.list_names() if n.startswith(run.lab + "-"))

    def finish() -> dict:
        return {"label": run.label, "namespaces": len(up), "events_seen": len(run.events),
                "measured_for_s": round(time.monotonic() - began, 3), "not_a_row": [1, 2]}
    return finish


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    lines: list[str] = []
    name = f"{PREFIX}cmp"
    try:
        res, plans = runner.run_compare(EXPERIMENT, name=name, progress=lines.append,
                                        measures=[_namespaces])
    finally:
        for label in ("unnum", "num"):
            cli("down", f"{name}-{label}", check=False)
    paths = report.save_compare(out, res, plans)
    return {"res": res, "plans": plans, "paths": paths, "out": out, "lines": lines, "name": name}


def test_each_fabric_ran_alone_in_order_and_nothing_is_left(compared):
    lines = compared["lines"]
    starts = [i for i, m in enumerate(lines) if m.startswith("fabric ")]
    assert [lines[i].split()[1] for i in starts] == ["unnum", "num"], lines
    assert all(m.startswith(("fabric ", "[unnum] ", "[num] ")) for m in lines), lines
    assert not leftovers(compared["name"])
    r = compared["res"]
    assert r["fabrics"]["unnum"]["measured"]["namespaces"] == 14  # only its own lab was up ...
    assert r["fabrics"]["num"]["measured"]["namespaces"] == 14
    assert r["fabrics"]["num"]["lab"] == f"{compared['name']}-num"  # ... named PREFIX-LABEL


def test_results_have_both_columns_with_numbers(compared):
    r = compared["res"]
    assert r["kind"] == "compare" and r["name"] == "compare-addressing"
    assert list(r["fabrics"]) == ["unnum", "num"]
    assert compare.verdict(r)[0] == 0, compare.verdict(r)
    rows = r["compare"]
    for metric in ("summary.goodput_bps", "summary.interruption_s", "summary.handoff_p99_s",
                   "summary.convergence_s", "flows.kv1.interruption_s", "flows.kv2.goodput_bps",
                   "traffic.spine_bytes.spine1", "traffic.spine_bytes.spine2",
                   "traffic.bystanders.rx_bytes", "events.0.convergence.converge_s",
                   "measured.namespaces", "measured.events_seen"):
        assert set(rows[metric]) == {"unnum", "num"}, metric
        assert all(isinstance(v, (int, float)) for v in rows[metric].values()), (metric, rows[metric])
    assert "measured.not_a_row" not in rows and "measured.label" in rows  # scalars only
    for label, fab in r["fabrics"].items():
        assert fab["integrity_ok"] and fab["summary"]["faults_settled"], label
        assert [e["action"] for e in fab["events"]] == ["fail", "heal"]
        t = fab["traffic"]
        assert t["spine_bytes"]["spine2"] > 32 << 20  # spine1's link failed: kv1 moved over
        assert t["bystanders"]["hosts"] == ["prefill3", "prefill4", "decode3", "decode4"]
        assert t["links"]["leaf1-prefill1"]["tx_bytes"]["prefill1"] >= 48 << 20
        assert t["series"] and all(s for s in t["series"].values())
        for f in fab["flows"]:
            assert 0 < f["interruption_s"] < 5, (label, f["name"], f["interruption_s"])
        assert fab["measured"]["events_seen"] == 2  # the measure saw the timeline's events
    held = {e["expect"]: e["ok"] for e in r["expectations"]}
    assert all(held.values()) and len(held) == 3, r["expectations"]


def test_report_has_a_column_per_fabric_and_every_picture(compared):
    out = compared["out"]
    md = (out / "report.md").read_text()
    assert md.startswith("# compare-addressing: unnum vs num")
    head = next(line for line in md.splitlines() if line.startswith("|  |"))
    assert "unnum (" in head and "num (" in head
    for name in compare_plots():
        assert (out / name).stat().st_size > 10_000, name
        assert f"({name})" in md
    for label in ("unnum", "num"):  # each fabric's own full report beside it
        assert (out / label / "report.md").read_text().startswith("# compare-addressing on lab ")
        assert (out / label / "topology.png").exists()
    saved = json.loads((out / "results.json").read_text())
    assert saved["compare"].keys() == compared["res"]["compare"].keys()


def test_check_reads_the_compare_file_without_a_lab(compared):
    res = cli("check", EXPERIMENT)
    assert "on 2 fabrics: unnum = " in res.stdout, res.stdout


def compare_plots():
    from emulator.report.compare import COMPARE_PLOTS

    return list(COMPARE_PLOTS)
