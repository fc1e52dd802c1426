import json
from pathlib import Path

import pytest

from emulator.experiment.analysis import COUNTERS
from emulator.experiment.series import bottleneck, bytes_between, convergence_time, mean_rate, rates
from emulator.stats import jain, p50_p99


def test_p50_p99():
    assert p50_p99([]) == (None, None)
    assert p50_p99([0.3, 0.1, 0.2]) == (0.2, 0.3)
    assert p50_p99([x / 7 for x in range(1, 101)], 4) == (7.2857, 14.1429)


def test_jain():
    assert jain([1, 1, 1, 1]) == 1.0
    assert jain([1, 0, 0, 0]) == 0.25
    assert jain([]) == 0.0


def test_rates_and_interpolation():
    s = [(0.0, 0.0), (1.0, 1000.0), (2.0, 3000.0)]
    assert rates(s) == [(1.0, 8000.0), (2.0, 16000.0)]
    assert bytes_between(s, 0.5, 1.5) == pytest.approx(1500.0)
    assert mean_rate(s, 0.0, 2.0) == pytest.approx(12000.0)


def test_convergence_time_finds_when_flows_even_out():
    fast = [(t / 10, min(t, 20) * 100 + max(0, t - 20) * 50) for t in range(60)]
    slow = [(t / 10, min(t, 20) * 10 + max(0, t - 20) * 50) for t in range(60)]
    t = convergence_time({"a": fast, "b": slow}, start=0.0, end=5.9, window=0.5)
    assert t is not None and 1.5 <= t <= 2.5


def _port(node, tc, rate_bps, queue):
    """A sampled port sending at `rate_bps` with a constant `queue`, 0..10 s."""
    return {"node": node, "port": "p", "tc": tc,
            "series": {"tx_bytes": [(t, t * rate_bps / 8) for t in range(11)],
                       "queued": [(t, queue) for t in range(11)]}}


def test_bottleneck_is_the_busiest_port_of_the_class():
    ports = [_port("a", 3, 50e6, 0), _port("b", 3, 97e6, 200_000), _port("c", 0, 100e6, 0)]
    b = bottleneck(ports, 2.0, 8.0, 100e6, tc=3)
    assert (b["node"], b["utilisation"]) == ("b", pytest.approx(0.97))
    assert b["queue_p50"] == b["queue_max"] == 200_000
    assert bottleneck(ports, 5.0, 5.0, 100e6, tc=3) is None  # empty window


def test_a_phase_spans_its_flows_and_rates_each_flow_while_it_ran():
    from emulator.experiment.analysis import phase

    flows = [{"name": "victim", "start_s": 0.0, "end_s": None,  # still running at the end
              "handoffs": [[0.5, 0.2], [1.5, 0.4], [4.0, 1.0], [6.0, 0.1]]},
             {"name": "a", "start_s": 1.0, "end_s": 3.0},
             {"name": "b", "start_s": 2.0, "end_s": 5.0},
             {"name": "late", "start_s": 9.0, "end_s": 10.0}]
    series = {"victim": [(0.0, 0), (10.0, 10_000)],  # 8 kbit/s throughout
              "a": [(1.0, 0), (3.0, 1000)], "b": [(2.0, 0), (5.0, 3000)],
              "late": [(9.0, 0), (10.0, 500)]}
    ports = [{"series": {"pause_tx": [(0.0, 0), (2.0, 4), (4.0, 10), (6.0, 30)]}},
             {"series": {}}]
    ph = phase(["a", "b"], flows, series, ports)
    assert (ph["from_s"], ph["to_s"]) == (1.0, 5.0)
    assert ph["rates_bps"] == pytest.approx({"victim": 8000.0, "a": 4000.0, "b": 8000.0})
    assert ph["handoffs"].keys() == {"victim"}  # only repeated flows have handoffs
    assert (ph["handoffs"]["victim"]["count"], ph["handoffs"]["victim"]["max_s"]) == (2, 1.0)
    assert ph["pauses"] == 18  # 2 at t=1 -> 20 at t=5 (interpolated between samples)


# A real incast run (clos-2x4-cc, D = 4000): what the runner recorded and what it wrote.
# Recorded by feeding `rocelab run experiments/incast.yaml` through analysis.summarize;
# the ports are trimmed to the RoCE class around leaf3 (where the bottleneck is).
RECORDED = Path(__file__).parent / "fixtures" / "experiment"


def _recorded_incast():
    from emulator.experiment.analysis import FlowRecord, Recordings, summarize
    from emulator.experiment.spec import load
    from emulator.lab import load_topology

    rec = json.loads((RECORDED / "incast-recorded.json").read_text())
    exp, _ = load(rec["experiment"])
    plan = load_topology(rec["topology"])[1]
    flows = [FlowRecord(**f | {"series": [tuple(x) for x in f["series"]],
                               "handoffs": [tuple(x) for x in f["handoffs"]]}) for f in rec["flows"]]
    out = summarize(exp, plan, Recordings(flows, rec["ports"], rec["events"], rec["pfc0"],
                                          rec["pfc1"], rec["lossless_drops"]))
    return json.loads(json.dumps(out)), json.loads((RECORDED / "incast-results.json").read_text())


def test_summary_of_a_recorded_incast_is_what_the_run_wrote():
    got, wrote = _recorded_incast()
    for key in wrote:
        if key == "flows":  # keys added since the recording (per QP `qps`) are checked below
            assert [{k: f[k] for k in w} for f, w in zip(got[key], wrote[key])] == wrote[key]
        else:
            assert got[key] == wrote[key], key
    for f in got["flows"]:  # every QP's path and DCQCN state, for `diagnose`
        assert f["qps"] and all(q["udp_sport"] and q["spine"] in f["spines"] for q in f["qps"])


def test_recorded_incast_is_fair_busy_and_lossless():
    got, _ = _recorded_incast()
    s = got["steady"]
    assert s["jain"] >= 0.99 and set(s["rates_bps"]) == {"p1", "p2", "p3", "p4"}
    assert (s["bottleneck"]["node"], s["bottleneck"]["port"]) == ("leaf3", "decode1")
    assert s["bottleneck"]["utilisation"] >= 0.95 and s["bottleneck"]["queue_max"] < 1_500_000
    assert got["pfc"]["pauses"] == 0 and got["lossless_drops"] == 0 and got["integrity_ok"]
    for f in got["flows"]:
        assert f["fct_real_s"] == pytest.approx(f["fct_s"] / 4000)
        assert f["goodput_bps"] == pytest.approx(f["bytes"] * 8 / f["fct_s"])
        assert set(COUNTERS) <= set(f) and f["spines"]


def test_a_flow_that_failed_has_no_completion_time():
    from emulator.experiment.analysis import FlowRecord, flow_summary
    from emulator.units import Dilation

    failed = FlowRecord(name="x", src="a", dst="b", op="write", bytes=100, start_s=1.0,
                        end_s=3.0, series=[(1.0, 0.0), (2.0, 50.0)], error="QP over its retry limit")
    f = flow_summary(failed, Dilation(4000))
    assert (f["end_s"], f["fct_s"], f["fct_real_s"], f["goodput_bps"]) == (None, None, None, None)
    assert f["error"] and not f["integrity_ok"] and f["rate_series"] == [(2.0, 400.0)]
