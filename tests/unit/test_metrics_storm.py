"""Histograms, per-flow series, and faults and actions as metrics, on a capture taken
mid pause-storm (`rocelab run experiments/pause-storm.yaml` on a lab brought up with
`--metrics`: decode1 not draining, PFC pausing, a gray link fault leaf4-spine2 in force;
engines that had already finished one transfer each, others in flight).

Fixtures: `rocelab metrics LAB --capture tests/unit/fixtures/metrics/clos-2x4-cc-storm`;
the golden exposition is rewritten by `make golden` (ROCELAB_UPDATE_GOLDEN=1).
"""

from __future__ import annotations

import json
import math
import socket
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from emulator.congestion.controller import Controller
from emulator.engine.job import Job, Op, flow_of
from emulator.errors import RocelabError
from emulator.experiment import actions
from emulator.histogram import PFC_REACTION_BUCKETS, TRANSFER_BUCKETS, Histogram
from emulator.metrics import launch as metrics_launch
from emulator.metrics.collectors import events
from emulator.metrics.collectors.dataplane import _pfc
from emulator.metrics.exporter import Listen, exposition, reference_exposition, serve
from emulator.metrics.model import Families, Family, Kind
from emulator.metrics.scrape import build, load_capture

FIXTURES = Path(__file__).parent / "fixtures" / "metrics"
CAPTURE = FIXTURES / "clos-2x4-cc-storm"
GOLDEN = FIXTURES / "clos-2x4-cc-storm.prom"


@pytest.fixture(scope="module")
def storm():
    plan, outcomes = load_capture(CAPTURE, source="topologies/clos-2x4-cc.yaml")
    return plan, outcomes, build(plan, outcomes, clock=lambda: 0.0)


def family(scrape, name: str) -> Family:
    return next(f for f in scrape.families if f.name == name)


def values(scrape, name: str) -> dict[tuple, float]:
    return {tuple(sorted((k, v) for k, v in labels.items() if k != "lab")): v
            for labels, v in family(scrape, name).samples}


def hists(scrape, name: str) -> dict[tuple, Histogram]:
    return {tuple(sorted((k, v) for k, v in labels.items() if k != "lab")): h
            for labels, h in family(scrape, name).histograms}


# -- the histogram kind -------------------------------------------------------------


def test_histogram_buckets_are_upper_bounds_inclusive():
    h = Histogram.empty((0.001, 0.01, 1.0))
    for v in (0.0005, 0.001, 0.002, 0.01, 5.0):
        h.observe(v)
    assert h.counts == [2, 2, 0, 1] and h.count == 5 and h.sum == pytest.approx(5.0135)
    assert h.cumulative() == [(0.001, 2), (0.01, 4), (1.0, 4), (math.inf, 5)]
    assert Histogram.from_json(json.loads(json.dumps(h.to_json()))) == h


@pytest.mark.parametrize("bad", [
    {"le": [1.0, 2.0], "counts": [1, 2]},  # no +Inf bucket
    {"le": [2.0, 1.0], "counts": [0, 0, 0]},  # unsorted
    {"le": [1.0], "counts": [-1, 0]},
    {"counts": [0]},
])
def test_a_histogram_that_makes_no_sense_is_refused(bad):
    with pytest.raises((ValueError, KeyError)):
        Histogram.from_json(bad)


def test_histogram_names_and_labels():
    with pytest.raises(ValueError, match="suffix"):
        Family("rocelab_x_seconds_bucket", Kind.HISTOGRAM, "")
    fams = Families("l")
    with pytest.raises(ValueError, match="le"):
        fams.add_histogram("rocelab_x_seconds", "", Histogram.empty((1.0,)), {"lab": "l", "le": "1"})


def test_bucket_bounds_span_what_they_measure():
    assert TRANSFER_BUCKETS[0] == 1e-3 and TRANSFER_BUCKETS[-1] == 60.0
    assert PFC_REACTION_BUCKETS[0] <= 50e-6 and PFC_REACTION_BUCKETS[-1] >= 0.1
    assert list(TRANSFER_BUCKETS) == sorted(TRANSFER_BUCKETS)


# -- the capture: exposition ----------------------------------------------------------


def test_golden_exposition(storm, golden):
    golden(str(GOLDEN), exposition(storm[2].families))  # an absolute path: kept beside the capture


def test_histograms_are_byte_identical_to_prometheus_client_and_parse(storm):
    families = storm[2].families
    text = exposition(families)
    assert text == reference_exposition(families)
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("rocelab_pfc_reaction_seconds", "rocelab_transfer_duration_seconds",
                 "rocelab_kv_handoff_seconds"):
        assert parsed[name].type == "histogram", name
        suffixes = {s.name.removeprefix(name) for s in parsed[name].samples}
        assert suffixes == {"_bucket", "_count", "_sum"}, name


def test_every_histogram_is_cumulative_and_ends_in_its_count(storm):
    for fam in storm[2].families:
        for labels, h in fam.histograms:
            buckets = [n for _, n in h.cumulative()]
            assert buckets == sorted(buckets) and buckets[-1] == h.count, (fam.name, labels)
            assert h.sum >= 0


# -- what each collector made of it -----------------------------------------------------


def test_pfc_reaction_histogram_counts_every_pause(storm):
    scrape = storm[2]
    h = hists(scrape, "rocelab_pfc_reaction_seconds")
    xoff, xon = h[(("event", "xoff"),)], h[(("event", "xon"),)]
    pauses = values(scrape, "rocelab_pfc_pauses_total")[()]
    assert xoff.count == pauses > 50  # the controller counts a pause per XOFF it acted on
    assert 0 < xon.count <= xoff.count
    assert 20e-6 < xoff.sum / xoff.count < 0.05  # mean reaction: tens of us to ms
    assert 0 < values(scrape, "rocelab_pfc_reaction_p50_seconds")[()] < 0.1  # the gauges stay


def test_pfc_without_histograms_still_gives_the_quantile_gauges():
    fams = Families("l")
    _pfc(fams, json.dumps({"pauses": 2, "reaction_us": [100.0, 300.0], "paused_s": {}}))
    names = {f.name for f in fams}
    assert "rocelab_pfc_reaction_p99_seconds" in names
    assert not any(f.histograms for f in fams)


def test_transfer_histograms_count_each_finished_transfer(storm):
    scrape = storm[2]
    done = values(scrape, "rocelab_engine_transfers_total")
    for metric in ("rocelab_transfer_duration_seconds", "rocelab_kv_handoff_seconds"):
        h = hists(scrape, metric)
        assert {k: v.count for k, v in h.items()} == done, metric
    fct = hists(scrape, "rocelab_transfer_duration_seconds")[(("node", "prefill1"),)]
    handoff = hists(scrape, "rocelab_kv_handoff_seconds")[(("node", "prefill1"),)]
    assert fct.count == 2 and handoff.sum >= fct.sum > 0  # handoff = setup + data


def test_per_qp_series_carry_their_flow(storm):
    rates = values(storm[2], "rocelab_qp_sent_bytes_total")
    assert rates and all({"flow", "src", "dst"} <= {k for k, _ in key} for key in rates)
    flows = {dict(k)["flow"] for k in rates}
    assert flows == {"prefill1->decode1", "prefill3->decode1", "prefill2->decode2"}
    on_decode1 = {dict(k)["flow"] for k in rates if dict(k)["node"] == "decode1"}
    assert on_decode1 == {"prefill1->decode1", "prefill3->decode1"}  # both ends label their QPs
    active = values(storm[2], "rocelab_engine_transfer_size_bytes")
    assert {dict(k)["flow"] for k in active} <= flows


def test_flow_series_sum_every_qp_finished_or_live(storm):
    scrape = storm[2]
    per_flow = values(scrape, "rocelab_flow_sent_bytes_total")
    host = values(scrape, "rocelab_engine_qp_sent_bytes_total")
    for key, total in host.items():
        node = dict(key)["node"]
        mine = sum(v for k, v in per_flow.items() if dict(k)["node"] == node)
        assert mine == total, node  # every QP of these engines served a named flow
    assert per_flow[(("dst", "decode1"), ("flow", "prefill1->decode1"), ("node", "prefill1"),
                     ("src", "prefill1"))] > 32 << 20  # one finished 32 MiB transfer and more
    transfers = values(scrape, "rocelab_flow_transfers_total")
    assert transfers[(("dst", "decode1"), ("flow", "prefill1->decode1"), ("node", "prefill1"),
                      ("src", "prefill1"))] == 2
    assert all(v == 0 for k, v in transfers.items() if dict(k)["node"].startswith("decode"))
    cuts = values(scrape, "rocelab_engine_dcqcn_rate_reductions_total")
    live = values(scrape, "rocelab_qp_dcqcn_rate_reductions_total")
    for key, total in cuts.items():
        node = dict(key)["node"]
        assert total >= sum(v for k, v in live.items() if dict(k)["node"] == node)
    assert sum(cuts.values()) > 0


def test_an_engine_from_before_flows_gives_no_flow_series():
    from emulator.metrics.collectors.engine import Collector

    plan, _ = load_capture(CAPTURE, source="x")
    reply = {"event": "stats", "qps": {"300": {"bytes_sent": 5}}, "transport": {},
             "transfers_done": 1, "retired": {}, "transfers": []}
    fams = {f.name: f for f in Collector.parse({"prefill1": reply}, plan)}
    assert not any(n.startswith("rocelab_flow_") for n in fams)
    assert fams["rocelab_qp_sent_bytes_total"].samples == [
        ({"lab": plan.lab, "node": "prefill1", "qp": "0x12c"}, 5.0)]
    assert "rocelab_transfer_duration_seconds" not in fams


def test_faults_and_actions_in_force(storm):
    scrape = storm[2]
    assert values(scrape, "rocelab_fault_active") == {
        (("how", "loss 1%"), ("kind", "link"), ("target", "leaf4-spine2")): 1.0}
    fail_heal = values(scrape, "rocelab_fault_events_total")
    assert fail_heal[(("action", "fail"),)] == fail_heal[(("action", "heal"),)] + 1
    assert values(scrape, "rocelab_action_active") == {
        (("kind", "drain"), ("setting", "off"), ("target", "decode1")): 1.0}
    assert values(scrape, "rocelab_action_events_total") == {(("kind", "drain"),): 3.0}


def test_events_parse_node_faults_and_nothing_at_all(storm):
    plan = storm[0]
    assert {f.name: f.samples for f in events.Collector.parse({}, plan)} == {
        "rocelab_fault_active": [], "rocelab_action_active": [],
        "rocelab_fault_events_total": [({"lab": plan.lab, "action": "fail"}, 0.0),
                                       ({"lab": plan.lab, "action": "heal"}, 0.0)]}
    doc = {"active": [{"fault": "node", "node": "spine1", "silent": True}], "events": []}
    fams = {f.name: f for f in events.Collector.parse({"faults": json.dumps(doc)}, plan)}
    assert fams["rocelab_fault_active"].samples == [
        ({"lab": plan.lab, "kind": "node", "target": "spine1", "how": "silent"}, 1.0)]


def test_events_fetch_reads_the_run_dir(storm, tmp_path, monkeypatch):
    plan = storm[0]
    monkeypatch.setattr(events, "lab_run_dir", lambda _lab: tmp_path)
    assert events.Collector(plan).fetch() == {"faults": "", "actions": ""}
    (tmp_path / "faults.json").write_text('{"active": []}')
    assert events.Collector(plan).fetch()["faults"] == '{"active": []}'


# -- the writers: experiment actions, the controller, the engines' flow names --------------


def test_actions_record_what_they_hold_and_restore_clears_it(storm, tmp_path, monkeypatch):
    plan = storm[0]
    monkeypatch.setattr(actions, "lab_run_dir", lambda _lab: tmp_path)
    actions.record(plan, "drain", {"host": "decode1", "enabled": False})
    actions.record(plan, "ecn", {"node": "leaf3", "enabled": False})
    actions.record(plan, "dcqcn", {"host": "prefill1", "profile": "paper"})
    actions.record(plan, "vtysh", {"node": "spine1", "commands": ["show version"]})
    doc = json.loads((tmp_path / "actions.json").read_text())
    assert {(a["kind"], a["target"], a["setting"]) for a in doc["active"]} == {
        ("drain", "decode1", "off"), ("ecn", "leaf3", "off"), ("dcqcn", "prefill1", "paper")}
    actions.record(plan, "ecn", {"node": "leaf3", "enabled": True})  # back as declared
    actions.record(plan, "dcqcn", {"host": "prefill1", "profile": plan.congestion.host_dcqcn("prefill1")})
    doc = json.loads((tmp_path / "actions.json").read_text())
    assert [(a["kind"], a["target"]) for a in doc["active"]] == [("drain", "decode1")]
    assert doc["applied"] == {"drain": 1, "ecn": 2, "dcqcn": 2, "vtysh": 1}
    actions.release(plan, {("drain", "decode1")})
    assert json.loads((tmp_path / "actions.json").read_text())["active"] == []


def test_actions_on_a_lab_without_a_run_dir_record_nothing(storm, tmp_path, monkeypatch):
    monkeypatch.setattr(actions, "lab_run_dir", lambda _lab: tmp_path / "gone")
    actions.record(storm[0], "drain", {"host": "decode1", "enabled": False})
    assert not (tmp_path / "gone").exists()


def test_controller_writes_cumulative_reaction_histograms(storm, tmp_path):
    ctl = Controller(storm[0])
    ctl.run_dir = tmp_path
    for us in (30, 80, 80, 4000):
        ctl.reaction_hist["xoff"].observe(us / 1e6)
        ctl.reactions_us.append(us)
    ctl.pauses = 4
    ctl.report()
    fams = Families("l")
    _pfc(fams, (tmp_path / "pfc.json").read_text())
    (labels, h), = [x for f in fams for x in f.histograms if x[0]["event"] == "xoff"]
    assert h.count == 4 and h.counts[:3] == [0, 1, 2] and h.sum == pytest.approx(0.00419)


def test_flow_names_and_ends():
    job = Job(Op.WRITE, size=1)
    assert flow_of(job, "prefill1", "10.2.3.3", initiator=True) == (
        "prefill1->10.2.3.3", "prefill1", "10.2.3.3")
    read = Job(Op.READ, size=1)  # decode1 pulls: the data's source is the peer
    assert flow_of(read, "decode1", "10.2.0.1", initiator=True)[1:] == ("10.2.0.1", "decode1")
    named = Job(Op.WRITE, size=1, extra={"flow": "kv-a", "src": "prefill1", "dst": "decode1"})
    assert flow_of(named, "decode1", "10.2.0.1", initiator=False) == ("kv-a", "prefill1", "decode1")


# -- up --metrics: where the exporter may listen ------------------------------------------


def test_listen_urls():
    assert Listen("127.0.0.1", 9464).url() == "http://127.0.0.1:9464/metrics"
    assert Listen("::1", 0).url(8080) == "http://[::1]:8080/metrics"
    assert str(Listen("::1", 0)) == "[::1]:0"


def test_up_refuses_a_taken_port_or_a_foreign_address_before_anything_exists():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(RocelabError, match="cannot listen"):
            metrics_launch.check_listen(f"127.0.0.1:{port}")
    with pytest.raises(RocelabError, match="cannot listen"):
        metrics_launch.check_listen("192.0.2.1:9464", expose=True)  # TEST-NET-1: not this machine's
    metrics_launch.check_listen("127.0.0.1:0")


@pytest.mark.parametrize("text", ["0.0.0.0:0", "[::]:0", ":::0", "192.0.2.1:9464",
                                  "[::ffff:127.0.0.1]:0"])
def test_a_non_loopback_address_needs_the_opt_in(text):
    where = Listen.parse(text)
    assert where.exposed
    with pytest.raises(RocelabError, match="--expose-metrics"):
        metrics_launch.check_listen(text)  # up's check, before anything exists
    with pytest.raises(RocelabError, match="not a loopback address"):
        serve(None, where)  # type: ignore[arg-type]  # refused before a socket is bound


@pytest.mark.parametrize("text", ["127.0.0.1:0", "127.0.0.2:0", "[::1]:0"])
def test_loopback_needs_no_opt_in(text):
    assert not Listen.parse(text).exposed
    metrics_launch.check_listen(text)


def test_with_the_flag_an_exposed_address_gets_past_the_check_and_a_warning():
    # (an address this machine lacks: the bind fails, nothing is served beyond loopback)
    with pytest.raises(RocelabError, match="cannot listen"):
        serve(None, Listen("192.0.2.1", 0), expose=True)  # type: ignore[arg-type]
    assert "reachable from other machines" in Listen("0.0.0.0", 0).warning()


@pytest.mark.parametrize("args", [["metrics", "somelab", "--listen", "0.0.0.0:9464"],
                                  ["metrics", "somelab", "--listen", "[::]:9464"],
                                  ["up", "topologies/clos-2x4.yaml", "--metrics", "0.0.0.0:0"]])
def test_the_cli_refuses_an_exposed_address_without_the_flag(args):
    from click.testing import CliRunner

    from emulator.cli import main

    res = CliRunner().invoke(main, args)
    lines = res.stderr.splitlines()
    assert res.exit_code == 64 and len(lines) == 1, res.stderr
    assert "not a loopback address" in lines[0]
    assert ("--expose-metrics" if args[0] == "up" else "--expose") in lines[0]


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_the_exporter_serves_ipv4_and_ipv6_loopback(storm, host):
    import urllib.request
    from types import SimpleNamespace

    if host == "::1" and not socket.has_ipv6:
        pytest.skip("no IPv6")
    scraper = SimpleNamespace(scrape=lambda: storm[2])
    server, thread = serve(scraper, Listen(host, 0))  # type: ignore[arg-type]
    try:
        url = Listen(host, 0).url(server.server_port)
        with urllib.request.urlopen(url, timeout=5) as r:
            assert b"rocelab_pfc_reaction_seconds_bucket{" in r.read()
    finally:
        server.shutdown()
        thread.join(5)
