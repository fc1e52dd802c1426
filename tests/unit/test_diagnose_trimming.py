"""diagnose's trimming-hotspot rule on hand-made evidence over clos-2x4-cc's real wiring:
last hop vs fabric, the ports named, and the cases where it must not fire."""

from __future__ import annotations

import json

from emulator.diagnose import Severity, diagnose, worst
from emulator.diagnose.evidence import Evidence, from_results
from emulator.lab import load_topology
from emulator.metrics.snapshot import port_from_json, thresholds, topology

PLAN = load_topology("topologies/clos-2x4-cc.yaml")[1]
KINDS, PEERS = topology(PLAN)


def evidence(ports=(), flows=()) -> Evidence:
    return Evidence(lab="t", source="unit", window_s=10.0, dilation=4000.0,
                    rate_bps=100_000_000, thresholds=thresholds(PLAN), kinds=KINDS, peers=PEERS,
                    ports=[port_from_json(p) for p in ports], paused_s={}, metrics={},
                    flows=list(flows))


def trimmed(node: str, port: str, trim: int, tx_packets: int = 1000, dropped: int = 0,
            tc: int = 2) -> dict:
    return {"node": node, "port": port, "tc": tc, "max_queued": 2_000_000,
            "tx_packets": tx_packets, "trim": trim, "tx_trim": trim - dropped,
            "dropped_trim": dropped}


def mrc_flow(name: str, src: str, dst: str, spines: list[str]) -> dict:
    return {"name": name, "src": src, "dst": dst, "op": "write", "bytes": 8 << 20,
            "spines": spines, "qps": [], "fct_s": 1.0, "start_s": 0.0, "end_s": 5.0}


def only(found):
    (f,) = [f for f in found if f.kind == "trimming-hotspot"]
    return f


def test_last_hop_incast_is_named_with_its_port_and_host():
    flows = [mrc_flow(f"w{i}", f"prefill{i}", "decode1", ["spine1"]) for i in (1, 2)]
    f = only(diagnose(evidence([trimmed("leaf3", "decode1", 900),
                                trimmed("leaf3", "decode2", 3, tx_packets=5000)], flows)))
    assert f.severity is Severity.WARNING and f.where == ["leaf3:decode1"]
    assert "900 (100%) at the last hop, into decode1: leaf3:decode1 (900, 47%)" in f.cause
    assert "fabric" not in f.cause and "incast" in f.fix and "entropy" not in f.fix
    (e,) = f.evidence
    assert (e["counter"], e["where"], e["value"], e["tc"]) == ("trimmed_packets", "last hop", 900, 2)
    assert f.affected == {"flows": ["w1", "w2"], "hosts": ["decode1", "prefill1", "prefill2"]}


def test_fabric_trims_are_told_apart_from_last_hop_ones():
    ports = [trimmed("leaf1", "spine1", 600), trimmed("spine1", "leaf3", 200),
             trimmed("leaf3", "decode1", 200)]
    f = only(diagnose(evidence(ports)))
    assert f.where == ["leaf1:spine1", "leaf3:decode1", "spine1:leaf3"]
    assert "200 (20%) at the last hop, into decode1" in f.cause
    assert "800 (80%) in the fabric: leaf1:spine1 (600, 38%), spine1:leaf3 (200, 17%)" in f.cause
    assert {e["port"]: e["where"] for e in f.evidence} == {
        "spine1": "fabric", "leaf3": "fabric", "decode1": "last hop"}
    assert "incast" in f.fix and "entropy values" in f.fix


def test_dropped_trimmed_packets_make_it_critical():
    f = only(diagnose(evidence([trimmed("leaf3", "decode1", 500, dropped=40)])))
    assert f.severity is Severity.CRITICAL and "40 trimmed packets were dropped" in f.cause


def test_it_must_not_fire_without_a_real_hotspot():
    quiet = [trimmed("leaf3", "decode1", 0),  # nothing trimmed
             trimmed("leaf1", "spine1", 49),  # a few: below MIN_TRIMS
             trimmed("spine2", "leaf4", 60, tx_packets=100_000),  # 0.06 %: a burst's odd trim
             trimmed("prefill1", "eth0", 5000)]  # a host never trims: not a switch's
    found = diagnose(evidence(quiet))
    assert "trimming-hotspot" not in [f.kind for f in found] and worst(found) is Severity.INFO


def test_it_reads_a_results_file_and_an_old_one_without_trim_counters():
    results = {"lab": "t", "dilation": 4000.0, "link_rate_bps": 100_000_000,
               "ports": [trimmed("leaf3", "decode1", 300)], "flows": [],
               "evidence": {"window_s": 10.0, "thresholds": thresholds(PLAN), "kinds": KINDS,
                            "peers": PEERS, "metrics": {}}}
    raw = json.loads(json.dumps(results))
    assert only(diagnose(from_results(raw, "r.json"))).where == ["leaf3:decode1"]
    for p in raw["ports"]:
        del p["trim"], p["tx_trim"], p["dropped_trim"]
    assert diagnose(from_results(raw, "old.json")) == []
