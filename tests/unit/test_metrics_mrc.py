"""The engine collector's MRC series, from a fake `stats` reply in the engine's schema
(docs/mrc.md): per connection EVs by state and recovery counters, per path bytes and
state; an engine without MRC adds nothing; every series is documented."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.metrics.collectors.engine import Collector
from emulator.metrics.collectors.engine_mrc import PATH_STATE
from emulator.metrics.model import Kind, index
from emulator.plan import compile_plan
from emulator.spec import parse

CONNS = json.loads((Path(__file__).parent / "fixtures" / "mrc" / "connections.json").read_text())
PLAN = compile_plan(parse({"name": "t", "spines": 2, "leaves": 2, "hosts": {"per_leaf": 2}},
                          "t.yaml"), "t.yaml")


def reply(*conns: dict) -> dict:
    return {"event": "stats", "qps": {}, "mrc": list(conns)}


@pytest.fixture(scope="module")
def fams():
    raw = {"prefill1": reply(CONNS["balanced"]),
           "prefill2": reply(CONNS["skewed"], CONNS["retired"]),
           "decode1": {"event": "stats", "qps": {}}}  # an engine without MRC connections
    return index(Collector.parse(raw, PLAN))


def values(fams, name: str) -> dict[tuple, float]:
    return {tuple(sorted((k, v) for k, v in lb.items() if k != "lab")): v
            for lb, v in fams[name].samples}


def test_connection_series_carry_the_stats_reply(fams):
    conn = (("conn", "0x5e6f"), ("dst", "decode1"), ("flow", "prefill3->decode1"),
            ("node", "prefill2"), ("src", "prefill3"))
    evs = values(fams, "rocelab_mrc_evs")
    assert evs[tuple(sorted(conn + (("state", "assumed_bad"),)))] == 6
    assert evs[tuple(sorted(conn + (("state", "good"),)))] == 2
    assert evs[tuple(sorted(conn + (("state", "denied"),)))] == 0
    assert values(fams, "rocelab_mrc_evs_configured")[conn] == 8
    assert values(fams, "rocelab_mrc_ev_retirements_total")[conn] == 6
    assert values(fams, "rocelab_mrc_trim_nacks_received_total")[conn] == 5
    assert values(fams, "rocelab_mrc_sacks_received_total")[conn] == 310
    assert values(fams, "rocelab_mrc_retransmitted_bytes_total")[conn] == 12 * 4096
    assert values(fams, "rocelab_mrc_cwnd_bytes")[conn] == 262144
    assert fams["rocelab_mrc_ev_retirements_total"].kind is Kind.COUNTER
    assert fams["rocelab_mrc_evs"].kind is Kind.GAUGE


def test_path_series_per_ev(fams):
    path = values(fams, "rocelab_mrc_path_bytes_total")
    skewed = {dict(k)["ev"]: v for k, v in path.items() if dict(k)["conn"] == "0x3c4d"}
    assert len(skewed) == 8 and skewed["49152"] == 6000 * 4096 and skewed["49169"] == 6000 * 4096
    assert sorted(skewed.values())[0] == 100 * 4096
    states = {dict(k)["ev"]: v for k, v in values(fams, "rocelab_mrc_path_state").items()
              if dict(k)["conn"] == "0x5e6f"}
    assert sorted(states.values()) == [PATH_STATE["good"]] * 2 + [PATH_STATE["assumed_bad"]] * 6
    labels = next(lb for lb, _ in fams["rocelab_mrc_path_packets_total"].samples)
    assert list(labels) == ["lab", "node", "conn", "flow", "ev", "plane"]


def test_connections_counted_per_engine_that_reports_mrc(fams):
    assert values(fams, "rocelab_mrc_connections") == {
        (("node", "prefill1"),): 1, (("node", "prefill2"),): 2}
    assert all(dict(k)["node"] != "decode1" for k in values(fams, "rocelab_mrc_evs"))


def test_a_reply_without_the_mrc_key_adds_no_mrc_series():
    fams = index(Collector.parse({"prefill1": {"event": "stats", "qps": {}}}, PLAN))
    assert not any(name.startswith("rocelab_mrc_") for name in fams)


def test_unknown_path_state_reads_as_unknown():
    conn = dict(CONNS["balanced"], paths=[{"ev": 1, "plane": 0, "state": "WEIRD", "bytes": 1}])
    fams = index(Collector.parse({"h": reply(conn)}, PLAN))
    assert [v for _, v in fams["rocelab_mrc_path_state"].samples] == [PATH_STATE["unknown"]]


def test_every_mrc_series_is_documented(fams):
    doc = Path("docs/telemetry.md").read_text()
    missing = [name for name in fams if name.startswith("rocelab_mrc_") and f"`{name}`" not in doc]
    assert not missing, f"docs/telemetry.md lacks {missing}"


def test_a_real_engine_stats_reply():
    """Captured from a lab's engines mid-transfer (`--transport mrc --evs 16`): the sender's
    live connection with its 16 paths, the receiver's (no EVs of its own) and a flow's
    finished connections summed under conn "finished"."""
    raw = json.loads((Path(__file__).parent / "fixtures" / "mrc" / "engine-stats.json").read_text())
    fams = index(Collector.parse(raw, PLAN))
    paths = values(fams, "rocelab_mrc_path_bytes_total")
    assert {dict(k)["node"] for k in paths} == {"prefill2"} and len(paths) == 16
    assert all(v > 0 for v in paths.values())
    configured = {(dict(k)["node"], dict(k)["conn"]): v
                  for k, v in values(fams, "rocelab_mrc_evs_configured").items()}
    assert configured[("prefill2", "0x7ca")] == 16 and configured[("decode2", "0xd96")] == 0
    assert configured[("prefill1", "finished")] == 16
