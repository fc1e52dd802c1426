"""Compare runs without a lab: the `fabrics:` field, every check on every fabric before
anything is created, expect lines that compare two paths, the per-run measurements
(interruption, port counters) and the compare rows and verdict, on a recorded compare
run (tests/unit/fixtures/compare: unnumbered vs numbered clos-2x4, an uplink failing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.errors import ExitCode, RocelabError, SpecError
from emulator.experiment import compare, expect_lines, runner, traffic
from emulator.experiment.analysis import FlowRecord, flow_summary, summary
from emulator.experiment.series import interruption
from emulator.experiment.spec import load, load_fabrics
from emulator.lab import load_topology
from emulator.units import Dilation

ROOT = Path(__file__).resolve().parents[2]
TOPOS = ROOT / "topologies"
RECORDED = Path(__file__).parent / "fixtures" / "compare" / "addressing-results.json"
FLOW = "flows:\n  - {name: f, src: prefill1, dst: decode1, size: 1MiB}\n"


def _write(tmp_path: Path, body: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(f"name: x\n{FLOW}{body}")
    return path


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(RECORDED.read_text())


# -- the experiment file -------------------------------------------------------------------


def test_fabrics_are_read_in_the_files_order_and_a_topology_is_one_unlabelled(tmp_path):
    path = _write(tmp_path, f"fabrics: {{l3: {TOPOS}/clos-2x4.yaml, l2: {TOPOS}/clos-2x4-numbered.yaml}}\n")
    exp, topos = load_fabrics(path)
    assert list(topos) == ["l3", "l2"] and topos["l2"].name == "clos-2x4-numbered.yaml"
    assert exp.topology is None
    with pytest.raises(SpecError, match="fabrics: a compare experiment"):
        load(path)
    exp, topos = load_fabrics(ROOT / "experiments" / "spine-failure.yaml")
    assert list(topos) == [""] and exp.fabrics is None


@pytest.mark.parametrize("body, message", [
    ("fabrics: {L3: {t}/clos-2x4.yaml}\n", "fabrics: label 'L3': 1-8 lowercase letters and digits"),
    ("fabrics: {l3-x: {t}/clos-2x4.yaml}\n", "fabrics: label 'l3-x'"),
    ("fabrics: {}\n", "fabrics: name at least one fabric"),
    ("topology: {t}/clos-2x4.yaml\nfabrics: {l3: {t}/clos-2x4.yaml}\n",
     "topology: give topology (one fabric) or fabrics (several, compared), not both"),
    ("", "topology: is required (or fabrics:"),
    ("fabrics: {l3: {t}/clos-2x4.yaml, l2: {t}/nope.yaml}\n", "line 4: fabrics.l2: no such file"),
    ("fabrics: {l3: {t}/clos-2x4.yaml}\nexpect: [fabrics.l2.summary.bytes > 0]\n",
     "expect: 'fabrics.l2.summary.bytes > 0': no fabric 'l2'; fabrics: l3"),
    ("topology: {t}/clos-2x4.yaml\nexpect: ['flows.f.fct_s < 2 * fabrics.l3.flows.f.fct_s']\n",
     "a fabrics.LABEL path needs `fabrics:`"),
])
def test_bad_fabrics_are_one_line_naming_the_field(tmp_path, body, message):
    path = _write(tmp_path, body.replace("{t}", str(TOPOS)))
    with pytest.raises(SpecError) as err:
        load_fabrics(path)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_every_fabric_is_checked_before_any_lab_and_labs_are_prefix_label(tmp_path):
    two = f"fabrics: {{a: {TOPOS}/clos-2x4.yaml, b: {TOPOS}/clos-2x4-numbered.yaml}}\n"
    ok = _write(tmp_path, f"lab: cmp\n{two}")
    exp, fabs = runner.fabrics(ok, live=False)
    assert [(f.label, f.lab, f.plan.lab) for f in fabs] == [("a", "cmp-a", "cmp-a"), ("b", "cmp-b", "cmp-b")]
    assert [f.lab for f in runner.fabrics(ok, name="h3-z", live=False)[1]] == ["h3-z-a", "h3-z-b"]
    plain = _write(tmp_path, two)
    assert [f.lab for f in runner.fabrics(plain, live=False)[1]] == ["clos-2x4", "clos-2x4-num"]
    same = _write(tmp_path, f"fabrics: {{a: {TOPOS}/clos-2x4.yaml, b: {TOPOS}/clos-2x4.yaml}}\n")
    with pytest.raises(SpecError, match="fabrics a and b would share lab clos-2x4"):
        runner.fabrics(same, live=False)
    long = _write(tmp_path, f"lab: averyveryverylongprefix\nfabrics: {{a: {TOPOS}/clos-2x4.yaml}}\n")
    with pytest.raises(SpecError, match="lab: lab 'averyveryverylongprefix-a' of fabric a"):
        runner.fabrics(long, live=False)
    # The second fabric lacks what a flow or an action names: refused, naming the fabric
    wide = _write(tmp_path, f"fabrics: {{a: {TOPOS}/clos-8x16.yaml, b: {TOPOS}/clos-2x4.yaml}}\n"
                  "actions:\n  - {at: 1s, fault: {fail: link, a: leaf9, b: spine1}}\n")
    with pytest.raises(RocelabError) as err:
        runner.fabrics(wide, live=False)
    assert str(err.value).startswith("fabric b: actions.0.fault: no node 'leaf9' in lab clos-2x4")
    assert err.value.fabric == "b" and err.value.exit_code == ExitCode.NOT_FOUND


def test_a_fault_naming_nothing_is_refused_before_a_one_topology_run_too():
    from emulator.experiment.spec import Experiment

    plan = load_topology(TOPOS / "clos-2x4.yaml")[1]
    exp = Experiment.model_validate({"name": "x", "topology": "t.yaml", "flows": [
        {"name": "f", "src": "prefill1", "dst": "decode1", "size": "1MiB"}],
        "actions": [{"at": "1s", "fault": {"fail": "link", "a": "leaf1", "b": "leaf2"}},
                    {"at": "2s", "fault": {"heal": "all"}}]})
    with pytest.raises(RocelabError, match=r"actions\.0\.fault: lab clos-2x4 has no link leaf1-leaf2"):
        runner.check(exp, plan)
    runner.check(exp.model_copy(update={"actions": exp.actions[1:]}), plan)


# -- expect: a path against another path ------------------------------------------------------

DOC = {"fabrics": {"l2": {"flows": [{"name": "kv1", "interruption_s": 12.0}], "ok": True},
                   "l3": {"flows": [{"name": "kv1", "interruption_s": 0.2}], "ok": True}}}


@pytest.mark.parametrize("line, ok", [
    ("fabrics.l2.flows.kv1.interruption_s >= 10 * fabrics.l3.flows.kv1.interruption_s", True),
    ("fabrics.l2.flows.kv1.interruption_s >= 100 * fabrics.l3.flows.kv1.interruption_s", False),
    ("fabrics.l3.flows.kv1.interruption_s < fabrics.l2.flows.kv1.interruption_s", True),
    ("fabrics.*.flows.kv1.interruption_s <= fabrics.l2.flows.kv1.interruption_s", True),
    ("fabrics.l2.flows.kv1.interruption_s >= 2.5e1 * fabrics.l3.flows.kv1.interruption_s", True),
    ("fabrics.l2.ok == fabrics.l3.ok", True),
    ("fabrics.l2.flows.kv1.interruption_s > 2 * fabrics.l9.flows.kv1.interruption_s", False),
])
def test_a_value_compared_with_another_path(line, ok):
    got = expect_lines.evaluate(DOC, expect_lines.parse(line))
    assert got["ok"] is ok, got


def test_a_failed_comparison_shows_both_sides_and_a_missing_one_says_so():
    got = expect_lines.evaluate(DOC, expect_lines.parse(
        "fabrics.l2.flows.kv1.interruption_s >= 100 * fabrics.l3.flows.kv1.interruption_s"))
    assert got["values"] == {"fabrics.l2.flows.kv1.interruption_s": 12.0,
                             "fabrics.l3.flows.kv1.interruption_s": 0.2}
    assert got["problem"] == ("fabrics.l2.flows.kv1.interruption_s = 12.0 (against 100 x "
                              "fabrics.l3.flows.kv1.interruption_s = 20)")
    missing = expect_lines.evaluate(DOC, expect_lines.parse("fabrics.l2.ok == fabrics.l9.ok"))
    assert missing["problem"] == "no value at fabrics.l9" and not missing["ok"]
    none = expect_lines.evaluate({"a": {"x": 1.0}, "b": {"x": None}}, expect_lines.parse("a.x > 2 * b.x"))
    assert not none["ok"]  # a value missing in one run: a failure, not a crash


@pytest.mark.parametrize("line, literal", [("flows.p1.op == write", "write"),
                                           ("steady.jain >= 0.9", 0.9), ("x.y == 1.5", 1.5)])
def test_literals_stay_literals(line, literal):
    e = expect_lines.parse(line)
    assert (e.ref, e.value) == (None, literal)


@pytest.mark.parametrize("bad", ["a.b > 2 * c.*.d", "a.b > 5 * c.d + 1", "a.b > c.d * 2"])
def test_a_compared_path_names_one_value_and_there_is_no_other_arithmetic(bad):
    with pytest.raises(ValueError, match=r"\[NUMBER \*\] PATH"):
        expect_lines.parse(bad)


# -- measurements of every run --------------------------------------------------------------


def test_interruption_is_the_longest_time_without_progress():
    series = [(0.0, 0), (0.1, 0), (0.6, 10), (0.7, 20), (0.8, 20), (2.9, 20), (3.0, 30), (3.4, 40)]
    assert interruption(series, 0.5, 3.4) == (0.7, pytest.approx(2.3))
    # a mark (the next transfer's data phase began) is progress too: the stall is split
    assert interruption(series, 0.5, 3.4, [2.0]) == (0.7, pytest.approx(1.3))
    assert interruption(series, 0.5, 0.5) == (0.5, 0.0)
    assert interruption(series, 3.0, 1.0) is None
    assert interruption([(0.0, 0), (5.0, 0)], 0.0, 5.0) == (0.0, 5.0)  # never moved


def test_a_flows_interruption_uses_delivered_bytes_from_its_first_data_phase():
    f = FlowRecord(name="f", src="a", dst="b", op="write", bytes=30, start_s=0.0, end_s=5.0,
                   series=[(0.0, 0), (0.6, 10), (0.7, 20), (5.0, 30)],  # sent: quickly ...
                   delivered=[(0.0, 0), (0.7, 10), (1.0, 20), (3.0, 20), (4.8, 30)],  # ... delivered
                   data_phases=[(0.6, 1.0), (4.5, 4.8)],  # the first QP setup took 0.6 s: not counted
                   result={"integrity_ok": True, "interruption_s": 0.3}, repeat=2)
    s = flow_summary(f, Dilation(4000))
    # 1.0 (the first transfer done) .. 4.5 (the second's data began): its setup was held up
    assert (s["interruption_s"], s["interruption_from_s"]) == (3.5, 1.0)
    assert s["interruption_real_s"] == pytest.approx(3.5 / 4000) and s["rx_gap_s"] == 0.3
    failed = flow_summary(FlowRecord(name="g", src="a", dst="b", op="write", bytes=10, start_s=1.0,
                                     end_s=None, series=[(1.0, 0), (2.0, 5), (9.0, 5)],
                                     error="retry limit"), Dilation(1))
    assert (failed["interruption_s"], failed["rx_gap_s"]) == (7.0, None)  # stopped until it failed


def test_the_summary_of_a_run():
    flows = [{"name": "a", "bytes": 100, "start_s": 1.0, "end_s": 3.0, "fct_s": 2.0,
              "interruption_s": 0.3, "handoffs": [[1.0, 0.2], [1.5, 0.4], [2.0, 0.9]]},
             {"name": "b", "bytes": 50, "start_s": 0.0, "end_s": None, "fct_s": None,
              "interruption_s": 4.0}]
    events = [{"kind": "fault", "convergence": {"converge_s": 0.2, "settled": True}},
              {"kind": "fault", "convergence": {"converge_s": 0.5, "settled": False}},
              {"kind": "ecn"}]
    s = summary(flows, events, Dilation(2))
    assert s["goodput_bps"] == 100 * 8 / 2.0 and s["fct_max_s"] == 2.0 and s["bytes"] == 150
    assert (s["interruption_s"], s["interruption_real_s"]) == (4.0, 2.0)
    assert (s["handoff_p50_s"], s["convergence_s"], s["faults_settled"]) == (0.4, 0.5, False)
    assert summary([], [], Dilation(1))["convergence_s"] is None


def test_port_counters_become_links_spines_and_bystanders():
    plan = load_topology(TOPOS / "clos-2x4.yaml")[1]
    zero = dict.fromkeys(traffic.FIELDS, 0)
    start = {traffic.port_key(n.name, p.name): dict(zero) for n in plan.nodes for p in n.interfaces}
    end = {k: dict(v) for k, v in start.items()}
    end["spine1:leaf1"] |= {"tx_bytes": 5_000_000, "tx_packets": 1000}
    end["spine1:leaf3"] |= {"tx_bytes": 200, "tx_packets": 2}
    end["leaf1:spine1"] |= {"tx_bytes": 7000, "tx_packets": 100}
    end["decode3:eth0"] |= {"rx_bytes": 64_000, "rx_packets": 50}  # flooded to a bystander
    start["leaf4:decode4"] = {"tx_bytes": 900, "rx_bytes": 0, "tx_packets": 9, "rx_packets": 0}
    end["leaf4:decode4"] |= {"tx_bytes": 100}  # the counter went back (a device recreated)
    del end["spine2:leaf2"]  # a port not read at the end is left out
    series = {"spine1:leaf1": [(0.1, 2_000_000), (0.2, 5_000_000)], "spine1:leaf3": [(0.1, 200)]}
    t = traffic.summarize(plan, {"start": start, "end": end, "series": series, "sample_every_s": 0.1},
                          [("prefill1", "decode1"), ("prefill2", "decode2")])
    assert t["spine_bytes"] == {"spine1": 5_000_200, "spine2": 0}
    assert t["spine_packets"]["spine1"] == 1002
    assert t["links"]["leaf1-spine1"] == {"bytes": 5_007_000, "packets": 1100,
                                          "tx_bytes": {"leaf1": 7000, "spine1": 5_000_000}}
    assert t["bystanders"] == {"hosts": ["prefill3", "prefill4", "decode3", "decode4"],
                               "rx_bytes": 64_000, "rx_packets": 50,
                               "by_host": {"prefill3": 0, "prefill4": 0, "decode3": 64_000, "decode4": 0}}
    assert t["ports"]["leaf4:decode4"]["tx_bytes"] == 100 and "spine2:leaf2" not in t["ports"]
    assert list(t["series"]) == ["spine1:leaf1"]  # control-traffic ports are left out
    assert len(t["ports"]) == sum(len(n.interfaces) for n in plan.nodes) - 1
    assert traffic.spine_series(["spine1", "spine2"], series) == {
        "spine1": [(0.1, 2_000_200), (0.2, 5_000_000)]}


# -- the compare document -------------------------------------------------------------------


def test_every_row_is_the_value_at_that_path_of_each_fabric(recorded):
    rows = recorded["compare"]
    assert compare.rows(recorded["fabrics"]) == rows  # recomputed from the fabrics: the same
    for metric, by_label in rows.items():
        for label, v in by_label.items():
            assert v == compare.value(recorded["fabrics"][label], metric), (metric, label)
    keys = list(rows)
    assert keys[:4] == list(compare.SUMMARY_ROWS)
    for m in ("summary.handoff_p99_s", "summary.convergence_s", "flows.kv2.handoff_p50_s",
              "events.1.convergence.converge_s", "traffic.spine_bytes.spine2", "integrity_ok",
              *compare.TRAFFIC_ROWS):
        assert m in rows, m
    assert "flows.kv1.handoff_p50_s" not in rows and "lossless_drops" not in rows  # do not apply


def test_rows_that_apply_to_no_fabric_are_left_out_and_measured_scalars_are_rows(recorded):
    fabrics = json.loads(json.dumps(recorded["fabrics"]))
    for r in fabrics.values():
        r["events"] = []
        r["summary"] |= {"convergence_s": None, "faults_settled": None}
        r["measured"] = {"stp_converge_s": 1.5, "blocked_ports": 2, "states": {"a": 1}}
    fabrics["num"]["measured"] = {"flooded_bytes": 10}
    keys = compare.metrics(fabrics)
    assert not [k for k in keys if k.startswith("events.") or "convergence" in k]
    assert keys[-3:] == ["measured.stp_converge_s", "measured.blocked_ports", "measured.flooded_bytes"]
    assert compare.rows(fabrics)["measured.flooded_bytes"] == {"unnum": None, "num": 10}


def test_expect_lines_of_a_compare_run(recorded):
    doc = {"fabrics": recorded["fabrics"]}
    each = compare.evaluate(doc, "flows.*.integrity_ok")
    assert each["ok"] and "fabrics.num.flows.kv2.integrity_ok" in each["values"]
    slow = compare.evaluate(doc, "summary.interruption_s < 0.5")  # unnum's is 1.08 s
    assert not slow["ok"] and slow["problem"] == "unnum: summary.interruption_s = 1.0763"
    cross = compare.evaluate(doc, "fabrics.unnum.summary.interruption_s >= "
                                  "3 * fabrics.num.summary.interruption_s")
    assert cross["ok"], cross
    assert compare.per_fabric(["flows.*.integrity_ok", "fabrics.a.x > fabrics.b.x",
                               "a.b > 2 * fabrics.b.x"]) == ["flows.*.integrity_ok"]


def _fabric(recorded, **changes) -> dict:
    return json.loads(json.dumps(recorded["fabrics"]["num"])) | changes


def test_the_verdict_is_the_worst_over_every_fabric_then_the_expectations(recorded):
    ok = {"fabrics": {"a": _fabric(recorded), "b": _fabric(recorded)}, "expectations": []}
    assert compare.verdict(ok)[0] == ExitCode.OK
    corrupt = _fabric(recorded, integrity_ok=False)
    corrupt["flows"][0]["integrity_ok"] = False
    failed = _fabric(recorded)
    failed["flows"][1]["error"] = "QP over its retry limit"
    res = {"fabrics": {"a": corrupt, "b": failed}, "expectations": [
        {"expect": "x > 1", "ok": False, "problem": "x = 0"}]}
    assert compare.verdict(res) == (ExitCode.TRANSFER_FAILED, "b: flows failed: kv2")
    res["fabrics"]["b"] = _fabric(recorded)
    assert compare.verdict(res) == (ExitCode.INTEGRITY_FAILED, "a: integrity failed: kv1")
    res["fabrics"]["a"] = _fabric(recorded, expectations=[{"expect": "y", "ok": False, "problem": "-"}])
    assert compare.verdict(res) == (ExitCode.EXPECTATION_FAILED, "x > 1 (x = 0)")


def test_summarize_puts_the_fabrics_side_by_side(recorded):
    from emulator.experiment.spec import Experiment

    exp = Experiment.model_validate({
        "name": "n", "description": "d", "fabrics": {"unnum": "a.yaml", "num": "b.yaml"},
        "flows": [{"name": "f", "src": "prefill1", "dst": "decode1", "size": "1MiB"}],
        "expect": ["integrity_ok", "fabrics.num.summary.bytes == fabrics.unnum.summary.bytes"]})
    res = compare.summarize(exp, recorded["fabrics"], {"unnum": "a.yaml", "num": "b.yaml"})
    assert list(res) == ["kind", "name", "description", "topologies", "fabrics", "compare",
                         "expectations", "integrity_ok"]
    assert res["kind"] == "compare" and res["compare"] == recorded["compare"]
    assert [e["ok"] for e in res["expectations"]] == [True, True]


def test_the_cli_prints_the_rows_a_reader_wants_first(recorded, capsys):
    from emulator.cli.run import _print_compare

    _print_compare(recorded, "out")
    text = capsys.readouterr().out
    assert "unnum (h3-cmp-unnum)" in text and "interruption (longest, any flow)" in text
    assert "1.076 s" in text and "spine2 sent" in text and "results: out/results.json" in text


def test_rail_fabrics_count_bytes_per_rail_and_compare_and_report_them():
    from emulator.experiment.compare import metrics as compare_metrics
    from emulator.report.data import rail_table
    plan = load_topology(TOPOS / "rail-4x8.yaml")[1]
    zero = dict.fromkeys(traffic.FIELDS, 0)
    start = {traffic.port_key(n.name, p.name): dict(zero) for n in plan.nodes for p in n.interfaces}
    end = {k: dict(v) for k, v in start.items()}
    end["prefill1:eth2"] |= {"tx_bytes": 4_000_000}
    end["decode1:eth2"] |= {"tx_bytes": 1000}
    t = traffic.summarize(plan, {"start": start, "end": end, "series": {}, "sample_every_s": 0.1},
                          [("prefill1", "decode1")])
    assert t["rail_bytes"] == {"0": 0, "1": 0, "2": 4_001_000, "3": 0}
    assert "traffic.rail_bytes.2" in compare_metrics({"rail": {"traffic": t}})
    assert rail_table({"traffic": t})[3] == ["2", "4.0 MB"]
    single = traffic.summarize(load_topology(TOPOS / "clos-2x4.yaml")[1],
                               {"start": {}, "end": {}, "series": {}, "sample_every_s": 0.1}, [])
    assert single["rail_bytes"] == {}


@pytest.mark.parametrize("prefix", ["ok/../x", "ok x", "ok\n", "ok-"])
def test_a_compare_prefix_is_a_whole_lab_name(tmp_path, prefix):
    # re.match accepted any name that merely began like one ("ok/../x-a"): fullmatch now
    ok = _write(tmp_path, f"fabrics: {{a: {TOPOS}/clos-2x4.yaml}}\n")
    with pytest.raises(SpecError) as err:
        runner.fabrics(ok, name=prefix, live=False)
    message = str(err.value)
    assert message.startswith(f"--name: {prefix!r}: lab {prefix + '-a'!r} of fabric a is not a "
                              "lab name") and "\n" not in message, message
