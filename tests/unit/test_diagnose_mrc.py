"""diagnose's path-imbalance finding on MRC connections over clos-2x4-cc's real wiring:
from a run's flows (`mrc` blocks with each path's spine), from the engines' rocelab_mrc_*
series (live, or a run without blocks), and through `rocelab diagnose --results`'s exit
code. Fires on a concentrated and on a mostly retired EV set, silent on a balanced one."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from emulator.cli import main
from emulator.diagnose import Severity, diagnose, rules
from emulator.diagnose.evidence import Evidence, from_results
from emulator.diagnose.mrcconns import from_metrics
from emulator.errors import ExitCode
from emulator.lab import load_topology
from emulator.metrics.collectors.engine import Collector
from emulator.metrics.snapshot import KEEP, labels_key, topology

PLAN = load_topology("topologies/clos-2x4-cc.yaml")[1]
KINDS, PEERS = topology(PLAN)
MIB = 1 << 20
CONNS = json.loads((Path(__file__).parent / "fixtures" / "mrc" / "connections.json").read_text())


def conn(evs: int = 16, spine_of=lambda i: f"spine{1 + i % 2}", state_of=lambda i: "good",
         bytes_of=lambda i: MIB, cid: str = "0xc1") -> dict:
    """An MRC stats entry (docs/mrc.md) whose paths carry their spine, as a run records."""
    paths = [{"ev": 49152 + i, "plane": 0, "state": state_of(i), "bytes": bytes_of(i),
              "packets": bytes_of(i) // 4096, "retirements": int(state_of(i) != "good"),
              "spine": spine_of(i)} for i in range(evs)]
    states = {s: sum(p["state"] == s for p in paths)
              for s in ("good", "assumed_bad", "denied", "unknown")}
    return {"conn": cid, "flow": "m1", "src": "prefill1", "dst": "decode1", "evs_total": evs,
            "evs_by_state": states, "retirements": evs - states["good"], "paths": paths}


def flow(block: dict, name: str = "m1") -> dict:
    return {"name": name, "src": "prefill1", "dst": "decode1", "op": "write",
            "bytes": 64 * MIB, "transport": "mrc", "spines": ["spine1", "spine2"], "qps": [],
            "fct_s": 1.0, "mrc": block}


def evidence(flows=(), metrics=None, mrc=()) -> Evidence:
    return Evidence(lab="t", source="unit", window_s=10.0, dilation=1.0, rate_bps=None,
                    thresholds={}, kinds=KINDS, peers=PEERS, ports=[], paused_s={},
                    metrics=metrics or {}, flows=list(flows), mrc=list(mrc))


def test_a_balanced_connection_is_silent():
    assert rules.path_imbalance(evidence([flow(conn())])) == []
    assert diagnose(evidence([flow(conn(bytes_of=lambda i: MIB + 4096 * (i % 5)))])) == []


def test_load_on_few_evs_names_them_and_their_spine_and_links():
    skew = conn(bytes_of=lambda i: 40 * MIB if i in (0, 2) else MIB // 4)
    [f] = rules.path_imbalance(evidence([flow(skew)]))
    assert (f.kind, f.severity, f.affected["flows"]) == ("path-imbalance", Severity.WARNING, ["m1"])
    assert "EV 49152, EV 49154" in f.cause and "2 of 16 EVs" in f.cause
    assert "spine1 carried" in f.cause  # both hot EVs hash to spine1
    assert f.where[:3] == ["spine1", "leaf1-spine1", "spine1-leaf3"], f.where
    assert {e.get("ev") for e in f.evidence if e["counter"] == "mrc_path_bytes"} == {49152, 49154}


def test_evs_hashed_unevenly_over_spines_is_imbalance():
    """Every EV carries the same, but 13 of 16 hash onto spine2: the spines are not."""
    [f] = rules.path_imbalance(evidence([flow(conn(spine_of=lambda i: "spine2" if i < 13
                                                   else "spine1"))]))
    assert "spine2 carried 1.6x the mean spine (spine1 19%, spine2 81%)" in f.cause, f.cause
    assert f.where[0] == "spine2"


def test_a_spine_no_ev_hashes_to_counts_as_idle():
    [f] = rules.path_imbalance(evidence([flow(conn(spine_of=lambda i: "spine1"))]))
    assert "spine1 carried 2.0x the mean spine (spine1 100%, spine2 0%)" in f.cause


def test_mostly_retired_evs_name_the_spine_they_go_through():
    retired = conn(state_of=lambda i: "assumed_bad" if i % 2 else "good",
                   bytes_of=lambda i: MIB // 8 if i % 2 else MIB)
    [f] = rules.path_imbalance(evidence([flow(retired)]))
    assert f.severity is Severity.WARNING
    assert "8 of 16 EVs retired (assumed_bad 8, denied 0)" in f.cause, f.cause
    assert "through spine2 (8) on leaf1-spine2, spine2-leaf3" in f.cause
    assert f.where[:3] == ["spine2", "leaf1-spine2", "spine2-leaf3"]


def test_at_the_floor_it_is_critical_and_ranks_first():
    floor = conn(state_of=lambda i: "good" if i < 4 else ("denied" if i < 6 else "assumed_bad"))
    found = diagnose(evidence([flow(floor)]))
    assert found[0].kind == "path-imbalance" and found[0].severity is Severity.CRITICAL
    assert "12 of 16 EVs retired (assumed_bad 10, denied 2; at its floor of 4 good EVs)" \
        in found[0].cause, found[0].cause


def test_a_few_retirements_and_little_traffic_stay_silent():
    few = conn(state_of=lambda i: "assumed_bad" if i < 3 else "good")  # 3/16 < 25 %
    small = conn(bytes_of=lambda i: 40_000 if i == 0 else 100)  # under 1 MiB in all
    assert rules.path_imbalance(evidence([flow(few), flow(small, "m2")])) == []


def test_the_flow_filter_keeps_the_finding_on_its_flow():
    ev = evidence([flow(conn(spine_of=lambda i: "spine1"))])
    assert [f.kind for f in diagnose(ev, flow="m1")] == ["path-imbalance"]


def scraped(raw: dict) -> dict:
    """The KEEP families of one scrape of fake engines, as evidence's metrics hold them."""
    fams = Collector.parse(raw, PLAN)
    return {f.name: {labels_key({k: v for k, v in lb.items() if k != "lab"}): v
                     for lb, v in f.samples} for f in fams if f.name in KEEP}


def test_live_series_rebuild_the_connections_sender_side_first():
    receiver = dict(CONNS["skewed"], paths=[])  # the other end: no sprayed bytes
    metrics = scraped({"prefill2": {"event": "stats", "qps": {}, "mrc": [CONNS["skewed"]]},
                       "decode2": {"event": "stats", "qps": {}, "mrc": [receiver]},
                       "prefill1": {"event": "stats", "qps": {}, "mrc": [CONNS["balanced"]]}})
    conns = {c["conn"]: c for c in from_metrics(metrics)}
    assert set(conns) == {"0x1a2b", "0x3c4d"} and conns["0x3c4d"]["node"] == "prefill2"
    assert len(conns["0x3c4d"]["paths"]) == 8 and conns["0x3c4d"]["evs_total"] == 8
    assert {p["state"] for p in conns["0x3c4d"]["paths"]} == {"good"}
    [f] = rules.path_imbalance(evidence(mrc=from_metrics(metrics)))
    assert f.affected["flows"] == ["prefill2->decode2"] and "EV 49152, EV 49169" in f.cause


def test_a_run_without_mrc_blocks_falls_back_to_its_series():
    metrics = scraped({"prefill2": {"event": "stats", "qps": {}, "mrc": [CONNS["retired"]]}})
    results = {"lab": "t", "flows": [], "evidence": {"kinds": KINDS, "peers": PEERS,
                                                      "metrics": metrics}}
    [f] = rules.path_imbalance(from_results(results, "r.json"))
    assert "6 of 8 EVs retired" in f.cause and f.severity is Severity.CRITICAL


def test_diagnose_results_exits_with_findings(tmp_path):
    results = {"lab": "t", "flows": [flow(conn(spine_of=lambda i: "spine1"))],
               "evidence": {"kinds": KINDS, "peers": PEERS, "metrics": {}, "window_s": 10}}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    out = CliRunner().invoke(main, ["diagnose", "--results", str(path), "--json"])
    assert out.exit_code == ExitCode.FINDINGS, out.output
    assert [f["kind"] for f in json.loads(out.output)["findings"]] == ["path-imbalance"]
    path.write_text(json.dumps(dict(results, flows=[flow(conn())])))
    assert CliRunner().invoke(main, ["diagnose", "--results", str(path)]).exit_code == 0


def test_live_leaves_finished_sums_out():
    """A real engine's reply: only the live connection, the sender's side, with its paths."""
    raw = json.loads((Path(__file__).parent / "fixtures" / "mrc" / "engine-stats.json").read_text())
    [c] = from_metrics(scraped(raw))
    assert (c["conn"], c["node"], c["evs_total"], len(c["paths"])) == ("0x7ca", "prefill2", 16, 16)


def two_planes() -> tuple[dict[str, str], dict[str, str]]:
    """Two planes as a `planes: 2` topology wires them: each host a NIC per plane (ethK on
    plane K), each plane its own leaves and spines (p<k>leaf<j>, p<k>spine<i>)."""
    kinds, peers = {"h1": "host", "h2": "host"}, {}
    for k in (0, 1):
        for j, host in ((1, "h1"), (2, "h2")):
            leaf = f"p{k}leaf{j}"
            kinds[leaf] = "leaf"
            peers[f"{host}:eth{k}"], peers[f"{leaf}:{host}"] = f"{leaf}:{host}", f"{host}:eth{k}"
            for i in (1, 2):
                spine = f"p{k}spine{i}"
                kinds[spine] = "spine"
                peers[f"{leaf}:{spine}"], peers[f"{spine}:{leaf}"] = f"{spine}:{leaf}", f"{leaf}:{spine}"
    return kinds, peers


def test_a_lost_plane_names_its_spines_and_links():
    kinds, peers = two_planes()
    block = conn(evs=16, spine_of=lambda i: f"p{i % 2}spine{1 + (i // 2) % 2}",
                 state_of=lambda i: "denied" if i % 2 else "good")
    for i, p in enumerate(block["paths"]):
        p["plane"] = i % 2
    ev = Evidence(lab="t", source="unit", window_s=1.0, dilation=1.0, rate_bps=None,
                  thresholds={}, kinds=kinds, peers=peers, ports=[], paused_s={}, metrics={},
                  flows=[dict(flow(block), src="h1", dst="h2")])
    [f] = rules.path_imbalance(ev)
    assert "8 of 16 EVs retired (assumed_bad 0, denied 8)" in f.cause
    assert "EV 49153/plane 1" in f.cause and "through p1spine1 (4), p1spine2 (4)" in f.cause
    assert f.where == ["p1spine1", "p1spine2", "p1leaf1-p1spine1", "p1spine1-p1leaf2",
                       "p1leaf1-p1spine2", "p1spine2-p1leaf2"], f.where
