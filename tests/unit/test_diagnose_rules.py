"""Each diagnose rule on small hand-made evidence over clos-2x4-cc's real wiring: what
fires it, what must not, and how findings rank. (test_diagnose_recorded.py runs them on
evidence recorded from the experiments under experiments/diagnose/.)"""

from __future__ import annotations

import pytest

from emulator.diagnose import Severity, diagnose, rules, worst
from emulator.diagnose.evidence import Evidence
from emulator.lab import load_topology
from emulator.metrics.snapshot import labels_key, thresholds, topology

PLAN = load_topology("topologies/clos-2x4-cc.yaml")[1]
KINDS, PEERS = topology(PLAN)
KMIN = thresholds(PLAN)["kmin"]
ECT_PER_STEP = 300  # ECN-capable packets a sampled port sends per 100 ms


def evidence(ports=(), metrics=None, flows=(), paused=None, window=10.0) -> Evidence:
    return Evidence(lab="t", source="unit", window_s=window, dilation=4000.0,
                    rate_bps=100_000_000, thresholds=thresholds(PLAN), kinds=KINDS,
                    peers=PEERS, ports=list(ports), paused_s=dict(paused or {}),
                    metrics={name: {labels_key(lb): v for lb, v in samples}
                             for name, samples in (metrics or {}).items()},
                    flows=list(flows))


def port(node, port_, tc=3, n=30, queued=0, marks_per_step=0, pause_tx=0, pause_at=None,
         **totals):
    """A sampled (node, port, TC) with `n` 100 ms samples of steady queue and traffic."""
    t = [round(i * 0.1, 1) for i in range(n)]
    series = {"queued": [(x, queued) for x in t],
              "tx_bytes": [(x, i * 400_000) for i, x in enumerate(t)],
              "ce_marked": [(x, i * marks_per_step) for i, x in enumerate(t)],
              "ecn_capable": [(x, i * ECT_PER_STEP) for i, x in enumerate(t)],
              "rx_ce": [(x, 0) for x in t],
              "pause_tx": [(x, pause_tx if pause_at is not None and x >= pause_at else 0)
                           for x in t]}
    return {"node": node, "port": port_, "tc": tc, "max_queued": queued,
            "ce_marked": marks_per_step * (n - 1), "pause_tx": pause_tx, "pause_rx": 0,
            "series": series, **totals}


def flow(name, src, dst, spines, sports=(49152,), **kw):
    qps = [{"udp_sport": s, "spine": spines[i % len(spines)], "retransmitted_packets": 0,
            "naks_rx": 0, "cnps_rx": 0, "bad_icrc": 0,
            "dcqcn": {"reductions": 0, "lowest_bps": 1e8, "line_bps": 1e8, "min_rate_bps": 1e5}}
           for i, s in enumerate(sports)]
    return {"name": name, "src": src, "dst": dst, "op": "write", "bytes": 8 << 20,
            "spines": sorted(set(spines)), "qps": kw.pop("qps", qps), "fct_s": 1.0, **kw}


def kinds_of(found):
    return [f.kind for f in found]


def test_nothing_happening_is_healthy():
    assert diagnose(evidence()) == [] and worst([]) is Severity.INFO


# -- ECN off --------------------------------------------------------------------


def test_a_deep_queue_fed_unmarked_packets_without_a_mark_is_ecn_off():
    ev = evidence([port("leaf3", "decode1", queued=3 * KMIN),
                   port("spine1", "leaf3", queued=3 * KMIN, marks_per_step=5)])
    found = rules.ecn_off(ev)
    assert kinds_of(found) == ["ecn-off"] and "leaf3" in found[0].cause
    assert "spine1 marked" in found[0].cause and found[0].severity is Severity.WARNING


def test_a_deep_queue_of_packets_already_marked_upstream_is_not_ecn_off():
    """RED never marks a CE packet again: arrivals all CE, no mark owed."""
    deep = port("spine1", "leaf3", queued=3 * KMIN)
    into = port("spine1", "leaf1", tc=3, queued=0)
    into["series"]["rx_ce"] = [(t, i * 300) for i, (t, _) in enumerate(into["series"]["rx_ce"])]
    assert rules.ecn_off(evidence([deep, into])) == []


def test_ce_arrivals_are_matched_by_time_when_a_port_starts_late():
    """A port's series starts once it carries traffic: aligning by index would shift the
    CE arrivals and make RED look owed (a false ECN-off seen in CI). Here every packet
    into the deep queue arrives CE: through leaf1 until 1 s, then through leaf2."""
    deep = port("spine2", "leaf3", queued=3 * KMIN)
    early = port("spine2", "leaf1", queued=0)
    early["series"]["rx_ce"] = [(t, min(i, 10) * 300) for i, (t, _) in
                                enumerate(early["series"]["rx_ce"])]
    late = port("spine2", "leaf2", queued=0)
    late["series"] = {k: v[10:] for k, v in late["series"].items()}  # active from 1.0 s
    late["series"]["rx_ce"] = [(t, (i + 1) * 300) for i, (t, _) in enumerate(late["series"]["rx_ce"])]
    assert rules.ecn_off(evidence([deep, early, late])) == []
    late["series"]["rx_ce"] = [(t, 0) for t, _ in late["series"]["rx_ce"]]  # leaf2's unmarked
    assert [f.where[0] for f in rules.ecn_off(evidence([deep, early, late]))] == ["spine2"]


def test_a_queue_that_marks_or_stays_below_kmin_is_not_ecn_off():
    assert rules.ecn_off(evidence([port("leaf3", "decode1", queued=3 * KMIN, marks_per_step=1),
                                   port("leaf4", "decode3", queued=KMIN // 2)])) == []


# -- pause storm -----------------------------------------------------------------


def test_a_host_that_stops_draining_is_the_origin_and_victims_are_named():
    ports = [port("decode1", "eth0", tc=0, pause_tx=4, pause_at=1.5),
             port("leaf3", "spine2", tc=0, pause_tx=30, pause_at=1.7),
             port("spine2", "leaf1", tc=0, pause_tx=20, pause_at=2.0)]
    flows = [flow("stuck", "prefill1", "decode1", ["spine2"]),
             flow("bystander", "prefill2", "decode2", ["spine2"])]
    found = rules.pause_storm(evidence(ports, flows=flows,
                                       paused={"spine2:leaf3:3": 4.0, "leaf1:spine2:3": 3.0}))
    f = found[0]
    assert f.kind == "pause-storm" and f.severity is Severity.CRITICAL
    assert f.cause.startswith("pause storm from leaf3:decode1: decode1 stopped draining")
    assert "bystander" in f.cause and "stuck" not in f.cause.split("do not use")[1]
    assert [e["node"] for e in f.evidence[:3]] == ["decode1", "leaf3", "spine2"]  # hop by hop


def test_an_incast_pause_storm_names_the_congested_port():
    ports = [port("leaf3", "spine1", tc=0, pause_tx=30, pause_at=1.0),
             port("leaf3", "decode1", queued=5 * KMIN)]
    flows = [flow(f"p{i}", f"prefill{i}", "decode1", ["spine1"]) for i in (1, 2, 3)]
    f = rules.pause_storm(evidence(ports, flows=flows, paused={"spine1:leaf3:3": 3.0}))[0]
    assert "an incast: 3 flows into decode1" in f.cause and "leaf3:decode1" in f.cause


def test_a_few_pauses_in_a_long_window_are_info():
    f = rules.pause_storm(evidence([port("leaf3", "spine1", tc=0, pause_tx=2, pause_at=1.0)],
                                   paused={"spine1:leaf3:3": 0.05}, window=30.0))[0]
    assert f.severity is Severity.INFO and f.cause.startswith("pause storm") is True


# -- DCQCN on a host ---------------------------------------------------------------


def _cnp_flow(name, src, cnps, dcqcn):
    q = {"udp_sport": 49152, "spine": "spine1", "cnps_rx": cnps, "retransmitted_packets": 0,
         "naks_rx": 0, "bad_icrc": 0, "dcqcn": dcqcn}
    return flow(name, src, "decode1", ["spine1"], qps=[q])


def test_cnps_without_rate_cuts_is_dcqcn_off_on_that_host():
    ev = evidence(flows=[_cnp_flow("off", "prefill2", 80, None),
                         _cnp_flow("on", "prefill1", 80, {"reductions": 12, "lowest_bps": 2e7,
                                                          "line_bps": 1e8, "min_rate_bps": 1e5})])
    found = rules.dcqcn_host(ev)
    assert [(f.kind, f.affected["hosts"]) for f in found] == [("dcqcn-off-host", ["prefill2"])]
    assert "received 80 CNPs and cut their rate 0 times" in found[0].cause


def test_a_min_rate_near_line_rate_is_reported_as_misconfigured():
    ev = evidence(flows=[_cnp_flow("hi", "prefill1", 50, {"reductions": 9, "lowest_bps": 8e7,
                                                          "line_bps": 1e8, "min_rate_bps": 8e7})])
    assert "stopped at the minimum rate, 80% of line rate" in rules.dcqcn_host(ev)[0].cause
    ok_ = evidence(flows=[_cnp_flow("lo", "prefill1", 50, {"reductions": 9, "lowest_bps": 3e7,
                                                           "line_bps": 1e8, "min_rate_bps": 1e5})])
    assert rules.dcqcn_host(ok_) == []  # cut to 30 %: far above a floor of 0.1 %


def test_a_few_cnps_mean_nothing():
    assert rules.dcqcn_host(evidence(flows=[_cnp_flow("x", "prefill2", 3, None)])) == []


# -- ECMP collision and congested spine -----------------------------------------------


def _tx(**by_port):
    return {"rocelab_interface_tx_bytes_total": [({"node": k.split("__")[0],
                                                    "port": k.split("__")[1]}, v)
                                                   for k, v in by_port.items()]}


def test_flows_piled_on_one_spine_while_the_other_idles_is_a_collision():
    ports = [port("spine2", "leaf4", queued=3 * KMIN, marks_per_step=4)]
    flows = [flow(f"c{i}", f"prefill{i}", "decode3", ["spine2"], sports=(49152 + i,))
             for i in (1, 2, 3)]
    ev = evidence(ports, _tx(spine2__leaf4=40e6, spine1__leaf4=2e3), flows)
    f = rules.ecmp_collision(ev)[0]
    assert f.kind == "ecmp-collision" and f.where[0] == "spine2" and f.severity is Severity.WARNING
    assert "3 flows (c1, c2, c3) hashed onto spine2" in f.cause
    assert next(e for e in f.evidence if e["counter"] == "udp_source_ports")["sports"] == \
        [49153, 49154, 49155]
    # both spines busy: congestion, not a collision
    assert rules.ecmp_collision(evidence(ports, _tx(spine2__leaf4=40e6, spine1__leaf4=30e6),
                                         flows)) == []


def test_a_congested_spine_is_a_warning_when_flows_through_it_are_slower():
    ports = [port("spine1", "leaf3", queued=3 * KMIN, marks_per_step=3)]
    slow = flow("via1", "decode3", "decode2", ["spine1"], handoff_p99_s=0.9)
    fast = flow("via2", "decode4", "decode1", ["spine2"], handoff_p99_s=0.3)
    f = rules.congested_spine(evidence(ports, flows=[slow, fast]))[0]
    assert f.severity is Severity.WARNING and "3.0x the latency" in f.cause
    assert f.affected["flows"] == ["via1"]
    same = flow("via2", "decode4", "decode1", ["spine2"], handoff_p99_s=0.85)
    assert rules.congested_spine(evidence(ports, flows=[slow, same]))[0].severity \
        is Severity.INFO


# -- routing, gray link, drops, MTU ------------------------------------------------------


def test_sessions_down_ecmp_and_missing_prefixes_are_routing_findings():
    m = {"rocelab_bgp_session_up": [({"node": "leaf2", "port": "spine2"}, 0),
                                    ({"node": "leaf2", "port": "spine1"}, 1)],
         "rocelab_bgp_ecmp_min_paths": [({"node": "leaf1"}, 1)],
         "rocelab_bgp_ecmp_expected_paths": [({"node": "leaf1"}, 2)],
         "rocelab_bgp_host_prefixes_missing": [({"node": "leaf4"}, 0)]}
    found = diagnose(evidence(metrics=m))
    assert kinds_of(found) == ["routing", "routing"]
    assert found[0].cause == "BGP session leaf2 -> spine2 is down"  # critical first
    assert found[1].severity is Severity.WARNING and "leaf1 has 1 ECMP" in found[1].cause


def test_a_link_that_swallows_everything_with_carrier_up_is_silent():
    m = {"rocelab_interface_tx_packets_total": [({"node": "leaf1", "port": "spine1"}, 500)],
         "rocelab_interface_rx_packets_total": [({"node": "spine1", "port": "leaf1"}, 0)],
         "rocelab_bgp_session_up": [({"node": "leaf1", "port": "spine1"}, 1)]}
    f = diagnose(evidence(metrics=m))[0]
    assert f.kind == "routing" and f.cause.startswith("link leaf1-spine1 is silent")
    assert "no BFD" in f.cause


def test_loss_on_one_link_and_retransmits_only_across_it_is_a_gray_link():
    m = {"rocelab_interface_tx_packets_total": [({"node": "leaf1", "port": "spine1"}, 10_000),
                                                ({"node": "leaf2", "port": "spine1"}, 10_000)],
         "rocelab_interface_rx_packets_total": [({"node": "spine1", "port": "leaf1"}, 9_800),
                                                ({"node": "spine1", "port": "leaf2"}, 10_000)]}
    bad = flow("lossy", "prefill1", "decode1", ["spine1"])
    bad["qps"][0]["retransmitted_packets"] = 400
    ok_ = flow("clean", "prefill3", "decode2", ["spine1"])
    found = rules.gray_link(evidence(metrics=m, flows=[bad, ok_]))
    assert [f.where[:2] for f in found] == [["leaf1", "spine1"]]
    assert "2.00% leaf1->spine1" in found[0].cause and found[0].affected["flows"] == ["lossy"]


def test_counter_loss_without_any_retransmission_is_read_skew_not_a_gray_link():
    """Live, mid-transfer: the two ends were read ms apart (a CI run saw "0.55 % lost" on
    a healthy edge link). Only retransmissions make it loss."""
    m = {"rocelab_interface_tx_packets_total": [({"node": "leaf4", "port": "decode3"}, 5_000)],
         "rocelab_interface_rx_packets_total": [({"node": "decode3", "port": "eth0"}, 4_970)]}
    assert rules.gray_link(evidence(metrics=m)) == []
    m["rocelab_engine_qp_retransmitted_packets_total"] = [({"node": "prefill1"}, 120)]
    assert [f.where[:2] for f in rules.gray_link(evidence(metrics=m))] == [["decode3", "leaf4"]]


def test_drops_in_the_lossless_class_name_the_port_and_pfc():
    m = {"rocelab_qdisc_class_dropped_packets_total": [
        ({"node": "leaf3", "port": "decode1", "tc": "3"}, 120),
        ({"node": "leaf3", "port": "decode1", "tc": "0"}, 7)]}
    f = diagnose(evidence(metrics=m))[0]
    assert f.kind == "lossless-drops" and f.severity is Severity.CRITICAL
    assert f.cause.startswith("120 packets dropped in the lossless class at leaf3:decode1")
    assert "PFC is off on leaf3" in f.cause


def test_mtu_mismatch_and_too_small_mtu():
    m = {"rocelab_interface_mtu_bytes": [({"node": "leaf1", "port": "spine2"}, 9000),
                                         ({"node": "spine2", "port": "leaf1"}, 1500),
                                         ({"node": "leaf1", "port": "spine1"}, 9000),
                                         ({"node": "spine1", "port": "leaf1"}, 9000)]}
    found = rules.mtu_mismatch(evidence(metrics=m))
    assert len(found) == 1 and found[0].cause.startswith(
        "MTU mismatch: spine2's end of 1 link(s) is at 1500 while leaf1 are at 9000")
    assert "below the 4140 B" in found[0].cause and found[0].severity is Severity.CRITICAL
    m["rocelab_interface_mtu_bytes"] += [({"node": "leaf2", "port": "spine2"}, 9000),
                                         ({"node": "spine2", "port": "leaf2"}, 1500)]
    m["rocelab_interface_mtu_bytes"][2:4] = [({"node": "leaf1", "port": "spine1"}, 4000),
                                             ({"node": "spine1", "port": "leaf1"}, 4000)]
    found = rules.mtu_mismatch(evidence(metrics=m))  # one finding per odd node, then the link
    assert [f.cause.split(":")[0] for f in found] == ["MTU mismatch", "MTU 4000 on both ends of leaf1-spine1"]
    assert found[0].where[:3] == ["spine2", "leaf1", "leaf2"]


# -- ranking and narrowing ------------------------------------------------------------------


def test_root_causes_rank_above_their_symptoms_and_flow_narrows():
    ports = [port("leaf3", "decode1", queued=3 * KMIN),
             port("spine1", "leaf3", queued=3 * KMIN, marks_per_step=5),
             port("leaf3", "spine1", tc=0, pause_tx=30, pause_at=1.0)]
    flows = [flow("into", "prefill1", "decode1", ["spine1"]),
             flow("far", "prefill3", "decode3", ["spine2"])]
    ev = evidence(ports, flows=flows, paused={"spine1:leaf3:3": 3.0})
    found = diagnose(ev)
    assert kinds_of(found)[:2] == ["ecn-off", "pause-storm"]
    assert kinds_of(diagnose(ev, flow="far")) == []
    assert "ecn-off" in kinds_of(diagnose(ev, src="prefill1", dst="decode1"))
    with pytest.raises(Exception, match="no flow 'nope'"):
        diagnose(ev, flow="nope")


def test_runs_keep_every_metric_the_rules_read():
    """results.json's evidence holds only KEEP: a rule reading anything else would see
    nothing after the lab is gone."""
    import re
    from pathlib import Path

    from emulator.metrics.snapshot import KEEP

    source = "".join(p.read_text() for p in Path(rules.__file__).parent.glob("*.py"))
    read = set(re.findall(r'"(rocelab_[a-z_]+)"', source))
    assert read and read <= set(KEEP), read - set(KEEP)
