"""RC against MRC in experiments, without a lab: the `transport` of flows and fabrics and
its errors, the transport numbers (path bytes per spine, spread, Jain, bisection,
failed flows, interruption, slowdown), the verdict of a flow allowed to fail, and the
shipped comparisons' `expect:` lines, which must fail on results that violate them."""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from emulator.engine.job import Job
from emulator.errors import ExitCode, RocelabError, SpecError
from emulator.experiment import analysis, compare, flowrun, multipath
from emulator.experiment.spec import Experiment, load_fabrics
from emulator.lab import load_topology

ROOT = Path(__file__).resolve().parents[2]
TOPOS = ROOT / "topologies"
EXPERIMENTS = ROOT / "experiments"


def _exp(tmp_path: Path, flow: str, head: str = "") -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(f"name: x\nlab: xe-t\n{head or f'topology: {TOPOS}/clos-2x4.yaml'}\n"
                    f"flows:\n  - {{name: f, src: prefill1, dst: decode1, size: 1MiB{flow}}}\n"
                    "  - {name: g, src: prefill2, dst: decode2, size: 1MiB}\n")
    return path


# -- the experiment file -------------------------------------------------------------------


@pytest.mark.parametrize("flow, head, message", [
    (", transport: tcp", "", "flows.0.transport: input should be 'rc' or 'mrc' (got \"tcp\")"),
    (", transport: mrc, op: read", "", "transport: mrc carries RDMA WRITE only"),
    (", transport: rc, evs: 8", "", "evs: only for transport: mrc"),
    (", transport: mrc, evs: 0", "", "flows.0.evs: input should be greater than or equal to 1 (got 0)"),
    (", transport: mrc, evs: 1025", "", "flows.0.evs: input should be less than or equal to 1024 (got 1025)"),
    (", unloaded: f", "", "flow 'f': unloaded: 'f' is not another flow; flows: f, g"),
    (", unloaded: nope", "", "unloaded: 'nope' is not another flow"),
    (", op: read", f"fabrics: {{rc: {TOPOS}/clos-2x4.yaml, mrc: {{topology: {TOPOS}/clos-2x4.yaml, "
     "transport: mrc}}", "flows.f: fabrics.mrc.transport: mrc carries RDMA WRITE only"),
    ("", f"fabrics: {{m: {{topology: {TOPOS}/clos-2x4.yaml, transport: udp}}}}",
     "fabrics.m.FabricEntry.transport: input should be 'rc' or 'mrc' (got \"udp\")"),
])
def test_a_bad_transport_is_refused_naming_the_field(tmp_path, flow, head, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        load_fabrics(_exp(tmp_path, flow, head))


def test_a_fabric_sets_the_transport_of_flows_without_their_own(tmp_path):
    head = (f"fabrics: {{rc: {TOPOS}/clos-2x4.yaml, mrc: {{topology: {TOPOS}/clos-2x4.yaml, "
            "transport: mrc}}")
    exp, topos = load_fabrics(_exp(tmp_path, ", transport: rc", head))
    assert topos["rc"] == topos["mrc"] == (TOPOS / "clos-2x4.yaml").resolve()
    assert [f.transport for f in exp.on_fabric("mrc").flows] == ["rc", "mrc"]  # f keeps its own
    assert [f.transport for f in exp.on_fabric("rc").flows] == ["rc", "rc"]
    assert exp.transport_on("rc") == "rc" and exp.flows[1].transport is None  # not changed


def test_an_mrc_flow_runs_on_the_engines_mrc_transport_or_is_refused_before_the_run():
    exp = Experiment.model_validate({"name": "x", "topology": "t.yaml", "flows": [
        {"name": "f", "src": "a", "dst": "b", "size": "1MiB", "transport": "mrc", "evs": 8}]})
    assert flowrun.transport_args(exp.flows[0].model_copy(update={"transport": "rc"})) == {}
    if "transport" in {f.name for f in dataclasses.fields(Job)}:  # the engine's MRC is built
        assert flowrun.transport_args(exp.flows[0]) == {"transport": "mrc", "evs": 8}
    else:
        with pytest.raises(RocelabError, match="flows.f.transport: mrc needs the engine's MRC"):
            flowrun.transport_args(exp.flows[0])


def test_the_shipped_comparisons_parse_with_a_transport_per_fabric():
    for name in ("mrc-vs-rc-collisions", "mrc-vs-rc-failure", "mrc-trimming-incast",
                 "mrc-plane-loss"):
        exp, topos = load_fabrics(EXPERIMENTS / f"{name}.yaml")
        assert [exp.transport_on(k) for k in topos] == ["rc", "mrc"], name
        assert len(set(topos.values())) == 1, name  # one topology, two transports


# -- the numbers ----------------------------------------------------------------------------


MRC_BLOCK = {"retransmitted_bytes": 8192, "retirements": 3, "evs_total": 4,
             "evs_by_state": {"good": 3, "assumed_bad": 1, "denied": 0, "unknown": 0},
             "paths": [{"ev": 49152, "plane": 0, "spine": "spine1", "bytes": 600, "packets": 1},
                       {"ev": 49153, "plane": 0, "spine": "spine2", "bytes": 400, "packets": 1},
                       {"ev": 49154, "plane": 0, "spine": None, "bytes": 24, "packets": 1}]}


def test_path_bytes_from_rc_qps_and_mrc_paths():
    assert multipath.qp_bytes([10, 20, 30, 40, 50], 2) == [90, 60]  # message i on QP i mod 2
    rc = {"qps": [{"spine": "spine1"}, {"spine": "spine2"}, {"spine": "spine1"}, {"spine": None}]}
    assert multipath.path_bytes(rc, [90, 60]) == {"spine1": 180, "spine2": 60, "unknown": 60}
    assert multipath.path_bytes({"mrc": MRC_BLOCK, "qps": rc["qps"]}, [90, 60]) == {
        "spine1": 600, "spine2": 400, "unknown": 24}


def test_repeated_mrc_transfers_fold_into_one_block():
    one = {"mrc": MRC_BLOCK, "longest_interruption_s": 0.002, "retransmitted_bytes": 5}
    two = copy.deepcopy(one) | {"longest_interruption_s": 0.004}
    two["mrc"]["evs_by_state"] = {"good": 4}
    got = multipath.fold_transport([one, two])
    assert got["longest_interruption_s"] == 0.004 and got["retransmitted_bytes"] == 10
    assert got["mrc"]["retirements"] == 6 and got["mrc"]["evs_by_state"] == {"good": 4}
    assert [p["bytes"] for p in got["mrc"]["paths"]] == [1200, 800, 48]


def test_a_failed_flows_interruption_runs_to_its_failure_and_rc_resends_whole_packets():
    failed = multipath.flow_numbers("rc", None, "QP over its retry limit", [1], 4096, 4.5)
    assert failed["failed"] and failed["longest_interruption_s"] == 4.5 and failed["path_bytes"] == {}
    rc = multipath.flow_numbers("rc", {"retransmitted_packets": 3, "interruption_s": 0.04,
                                       "qps": [{"spine": "spine1"}]}, None, [100], 4096, 0.2)
    assert rc["retransmitted_bytes"] == 3 * 4096 and rc["longest_interruption_s"] == 0.04
    mrc = multipath.flow_numbers("mrc", {"mrc": MRC_BLOCK, "longest_interruption_s": 0.001},
                                 None, [100], 4096, 0.1)
    assert mrc["retransmitted_bytes"] == 8192 and mrc["longest_interruption_s"] == 0.001
    assert not mrc["failed"] and mrc["mrc"] is MRC_BLOCK


def test_spread_jain_and_bisection_of_a_shaped_clos():
    plan = load_topology(TOPOS / "clos-2x4-cc.yaml", "xe-u")[1]
    rate = plan.congestion.rate_of(plan.speed_bps)
    # two prefill hosts on leaf1 to two decode hosts: the host links are the cut
    assert multipath.bisection_bps(plan, [("prefill1", "decode1"), ("prefill2", "decode3")]) == 2 * rate
    four = [("prefill1", "decode1"), ("prefill2", "decode3"), ("prefill3", "decode2"),
            ("prefill4", "decode4")]
    assert multipath.bisection_bps(plan, four) == 4 * rate  # leaf1 + leaf2: 4 uplinks
    assert multipath.bisection_bps(load_topology(TOPOS / "clos-2x4.yaml", "xe-u")[1], four) is None
    flows = [{"src": s, "dst": d, "path_bytes": {"spine1": 100}, "failed": False,
              "retransmitted_bytes": 1, "longest_interruption_s": 0.5} for s, d in four[:3]]
    flows.append({"src": "prefill4", "dst": "decode4", "path_bytes": {"spine2": 100},
                  "failed": True, "retransmitted_bytes": 0, "longest_interruption_s": 3.0})
    got = multipath.summary(plan, flows, 2 * rate, {"spine1": 103, "spine2": 97})
    assert got["spine_spread"] == 0.06 and got["spine_jain"] == pytest.approx(0.9991, abs=1e-4)
    assert multipath.summary(plan, flows, None)["spine_spread"] is None  # not recorded
    assert got["path_bytes"] == {"spine1": 300, "spine2": 100}
    assert got["path_spread"] == 1.0 and got["path_jain"] == pytest.approx(0.8)
    assert got["goodput_vs_bisection"] == 0.5 and got["failed_flows"] == 1
    assert got["retransmitted_bytes"] == 3 and got["longest_interruption_s"] == 3.0
    assert multipath.spread([0.0, 0.0]) is None and multipath.spread([97.0, 103.0]) == 0.06


def test_slowdown_is_fct_over_the_unloaded_flows():
    flows: list[dict[str, Any]] = [{"name": "alone", "fct_s": 2.0, "slowdown": None},
                                   {"name": "loaded", "fct_s": 3.0, "slowdown": None},
                                   {"name": "failed", "fct_s": None, "slowdown": None}]
    multipath.add_slowdowns(flows, {"alone": None, "loaded": "alone", "failed": "alone"})
    assert [f["slowdown"] for f in flows] == [None, 1.5, None]


def test_a_flow_allowed_to_fail_is_not_the_runs_verdict_but_any_other_is():
    res: dict[str, Any] = {"flows": [{"name": "a", "error": None, "integrity_ok": True},
                                     {"name": "b", "error": "QP over its retry limit",
                                      "integrity_ok": False, "may_fail": True}],
                           "integrity_ok": True, "lossless_drops": 0, "expectations": []}
    assert analysis.verdict(res)[0] == ExitCode.OK  # type: ignore[arg-type]
    res["flows"][1].pop("may_fail")
    assert analysis.verdict(res) == (ExitCode.TRANSFER_FAILED, "flows failed: b")  # type: ignore[arg-type]


# -- the shipped comparisons' expect lines can fail ------------------------------------------


def _fabric(**summary: Any) -> dict[str, Any]:
    return {"summary": summary, "flows": [], "integrity_ok": True}


def _doc(rc: dict[str, Any], mrc: dict[str, Any], flows: dict[str, dict[str, dict]] | None = None
         ) -> dict[str, Any]:
    fabs = {"rc": rc, "mrc": mrc}
    for label, by_flow in (flows or {}).items():
        fabs[label]["flows"] = [{"name": n, "integrity_ok": True, **v} for n, v in by_flow.items()]
    return {"fabrics": fabs}


def _failed_lines(name: str, doc: dict[str, Any]) -> list[str]:
    exp, _ = load_fabrics(EXPERIMENTS / f"{name}.yaml")
    return [e["expect"] for line in exp.expect if not (e := compare.evaluate(doc, line))["ok"]]


def test_the_collisions_expect_lines_pass_and_fail_on_mrcs_numbers():
    rc = _fabric(path_spread=0.67, path_jain=0.9, goodput_vs_bisection=0.7, handoff_p99_s=2.0)
    good = _fabric(path_spread=0.02, path_jain=0.999, goodput_vs_bisection=0.95, handoff_p99_s=1.0)
    assert _failed_lines("mrc-vs-rc-collisions", _doc(rc, good)) == []
    bad = _fabric(path_spread=0.06, path_jain=0.8, goodput_vs_bisection=0.89, handoff_p99_s=2.0)
    assert len(_failed_lines("mrc-vs-rc-collisions", _doc(rc, bad))) == 4


def test_the_failure_expect_lines_pass_and_fail_on_interruptions_and_failures():
    names = ("link", "spine", "link-silent", "spine-silent")
    rc = {n: {"failed": "silent" in n, "longest_interruption_s": 4.0 if "silent" in n else 0.1,
              "retransmitted_packets": 900} for n in names}
    mrc = {n: {"failed": False, "longest_interruption_s": 0.005} for n in names}
    doc = _doc(_fabric(failed_flows=2), _fabric(failed_flows=0), {"rc": rc, "mrc": mrc})
    assert _failed_lines("mrc-vs-rc-failure", doc) == []
    slow = {n: {"failed": True, "longest_interruption_s": 0.06} for n in names}  # 1.7x, 67x
    rc_survived = {n: v | {"failed": False} for n, v in rc.items()}
    doc = _doc(_fabric(failed_flows=0), _fabric(failed_flows=4),
               {"rc": rc_survived, "mrc": slow})
    assert len(_failed_lines("mrc-vs-rc-failure", doc)) == 6  # all but integrity_ok and
    # RC's resends (it crossed the failed link)
    unpinned = {n: v | {"retransmitted_packets": 0} for n, v in rc.items()}
    doc = _doc(_fabric(failed_flows=2), _fabric(failed_flows=0), {"rc": unpinned, "mrc": mrc})
    assert _failed_lines("mrc-vs-rc-failure", doc) == [
        "fabrics.rc.flows.link.retransmitted_packets > 0"]


def test_trims_are_counted_per_run_and_split_last_hop_from_fabric():
    from emulator.experiment.sampler import trims

    plan = load_topology(TOPOS / "clos-2x4-trim.yaml", "xe-u")[1]
    leaf3 = plan.node("leaf3")
    to_host = next(i.name for i in leaf3.interfaces if i.peer == "decode1")
    to_spine = next(i.name for i in leaf3.interfaces if i.peer == "spine1")
    start = {("leaf3", to_host, 2): {"trim": 5, "tx_trim": 5, "dropped_trim": 0},
             ("leaf3", to_spine, 2): {"trim": 0, "tx_trim": 0, "dropped_trim": 0}}
    end = {("leaf3", to_host, 2): {"trim": 105, "tx_trim": 95, "dropped_trim": 10},
           ("leaf3", to_spine, 2): {"trim": 7, "tx_trim": 7, "dropped_trim": 0},
           ("leaf3", to_spine, 3): {"trim": 0, "tx_trim": 0, "dropped_trim": 0}}
    assert trims(plan, start, end) == {"trim": 107, "tx_trim": 97, "dropped_trim": 10,
                                       "last_hop": 100, "fabric": 7}


def test_the_incast_expect_lines_pass_and_fail_on_pauses_trims_and_the_victim():
    def fab(pauses: int, trims: int, last_hop: int, victim: float) -> dict[str, Any]:
        return {"integrity_ok": True, "lossless_drops": 0, "pfc": {"pauses": pauses},
                "trimming": {"trim": trims, "last_hop": last_hop}, "summary": {},
                "flows": [{"name": "victim", "slowdown": victim, "integrity_ok": True}]}
    assert _failed_lines("mrc-trimming-incast", {"fabrics": {
        "rc": fab(50, 0, 0, 3.0), "mrc": fab(0, 357, 357, 0.98)}}) == []
    bad = _failed_lines("mrc-trimming-incast", {"fabrics": {
        "rc": fab(0, 3, 0, 1.0), "mrc": fab(4, 0, 0, 1.2)}})
    assert len(bad) == 7, bad  # all but integrity_ok and lossless_drops
    # RC's victim must wait 1.5x MRC's: 1.4x is not enough
    assert _failed_lines("mrc-trimming-incast", {"fabrics": {
        "rc": fab(50, 0, 0, 1.4), "mrc": fab(0, 357, 357, 1.0)}}) == [
        "fabrics.rc.flows.victim.slowdown >= 1.5 * fabrics.mrc.flows.victim.slowdown"]


def test_the_plane_loss_expect_lines_want_about_half_the_rate_and_no_mrc_failure():
    def fab(failed: int, during_failed: bool, slowdown: float | None) -> dict[str, Any]:
        return {"integrity_ok": True, "summary": {"failed_flows": failed},
                "flows": [{"name": "during", "failed": during_failed, "integrity_ok": True},
                          {"name": "after", "slowdown": slowdown, "integrity_ok": True}]}
    good = {"fabrics": {"rc": fab(2, True, None), "mrc": fab(0, False, 2.4)}}
    assert _failed_lines("mrc-plane-loss", good) == []
    for mrc, rc_during, n in ((fab(1, True, 1.0), True, 2), (fab(0, False, 3.0), False, 2)):
        assert len(_failed_lines("mrc-plane-loss", {"fabrics": {
            "rc": fab(0, rc_during, None), "mrc": mrc}})) == n
