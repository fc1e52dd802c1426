"""Experiments end to end: the congestion plane under incast and a pause storm,
and faults scheduled on an experiment's timeline."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
import yaml

from emulator import faults
from tests.browser import check_report

from .conftest import PREFIX, cli, leftovers
from .test_telemetry import PICTURES


@pytest.fixture(scope="module")
def cc(clos_cc):
    return clos_cc  # shared: each experiment's actions are restored when it ends


def run(experiment: str, name: str, tmp_path) -> dict:
    cli("run", f"experiments/{experiment}.yaml", "--out", str(tmp_path), "--name", name,
        timeout=240)
    assert (tmp_path / "report.md").read_text().startswith(f"# {experiment}")
    return json.loads((tmp_path / "results.json").read_text())


def diagnosed(tmp_path, code: int) -> list[dict]:
    """`rocelab diagnose` on the run in tmp_path: its findings, after checking the exit code
    (0: nothing above info, 13: a warning or critical finding)."""
    res = cli("diagnose", "--results", str(tmp_path / "results.json"), "--json", check=False)
    assert res.returncode == code, (res.returncode, res.stderr, res.stdout[:2000])
    return json.loads(res.stdout)["findings"]


@pytest.fixture(scope="module")
def incast(cc, tmp_path_factory):
    out = tmp_path_factory.mktemp("incast")
    return run("incast", cc.name, out) | {"out": str(out)}


def test_diagnose_finds_the_incast_with_dcqcn_healthy(incast):
    found = diagnosed(Path(incast["out"]), 0)
    assert all(f["severity"] == "info" for f in found), found


def test_incast_is_fair_marked_and_lossless(incast):
    r = incast
    assert r["integrity_ok"] and r["lossless_drops"] == 0
    assert r["steady"]["jain"] >= 0.9, r["steady"]
    assert all(f["cnps_rx"] > 0 for f in r["flows"])  # every sender was told to slow down
    assert sum(p["ce_marked"] for p in r["ports"]) > 0
    assert r["dilation"] == 4000 and all(f["fct_real_s"] == pytest.approx(f["fct_s"] / 4000)
                                         for f in r["flows"])


def test_the_incast_report_has_every_plot(incast):
    out = Path(incast["out"])
    for name in PICTURES + ("report.md", "report.html"):
        assert (out / name).stat().st_size > 1000, name
    for name in ("flow_rates.png", "queue_depth.png", "latency_cdf.png", "ecmp_spread.png",
                 "topology.png"):  # these always have data in an incast: look at them
        img = mpimg.imread(out / name)[..., :3]
        ink = np.mean(np.any(img < 0.9, axis=-1))
        colours = len(np.unique((img * 15).astype(int).reshape(-1, 3), axis=0))
        assert img.shape[1] >= 600 and ink > 0.02 and colours >= 8, (name, ink, colours)
    md = (out / "report.md").read_text()
    assert md.startswith("# incast") and all(f"({p})" in md for p in PICTURES if p.endswith(".png"))
    assert (out / "report.html").read_text().count("data:image/png;base64,") == 6


def test_the_incast_report_renders_every_plot_and_table_in_a_browser(incast):
    """report.html in headless Chromium (tests/browser.py): every plot decoded and laid out,
    every table with content, every flow in a table. (A separate module once ran its own
    shortened incast for this: the same report of the same experiment, ~15 s more.)"""
    out = Path(incast["out"])
    page = check_report(out / "report.html", min_imgs=6, min_tables=2)
    assert page.probe["headings"][0].startswith("incast")
    cells = (out / "report.html").read_text()
    assert all(f">{f['name']}<" in cells for f in incast["flows"])


def test_incast_keeps_the_bottleneck_busy_with_a_queue_held_by_ecn(incast):
    b = incast["steady"]["bottleneck"]
    assert (b["node"], b["port"]) == ("leaf3", "decode1"), b
    assert b["utilisation"] >= 0.9, b
    assert b["queue_max"] <= 1_500_000, b  # never above Kmax: marking, not pausing, holds it
    assert incast["pfc"]["pauses"] <= 10, incast["pfc"]  # few or no pauses


@pytest.mark.parametrize("via", ["spine1", "spine2"])
def test_a_pinned_flow_takes_its_spine_on_the_wire(cc, via):
    """`via` picks UDP source ports by `ip route get`; the bytes must really leave leaf1
    on that uplink. (RPS on shaped ports once made forwarding use its own flow hash, so
    every pinned flow took whichever spine that hash chose.)"""
    from emulator import forwarding
    from emulator.engine import client
    from emulator.engine.job import Job, Op

    src, dst, leaf = (cc.plan.node(n) for n in ("prefill1", "decode1", "leaf1"))
    client.ensure_engines(cc.plan, [src, dst])
    sports = forwarding.sports_via(cc.plan, src, dst, via, 2)
    before = forwarding.port_counters(leaf)
    res = client.transfer(cc.plan, src, dst, Job(Op.WRITE, size=4 << 20, qps=2, udp_sports=sports))
    after = forwarding.port_counters(leaf)
    sent = {s: after[s]["tx_bytes"] - before[s]["tx_bytes"] for s in ("spine1", "spine2")}
    other = "spine2" if via == "spine1" else "spine1"
    assert res["integrity_ok"] and sent[via] > 4 << 20 and sent[other] < 64 << 10, sent


def _pauses_after(r: dict, t: float) -> dict[str, int]:
    """Pause frames each port sent after time t (from the sampled series)."""
    out = {}
    for p in r["ports"]:
        s = p["series"]["pause_tx"]
        before = max((v for ts, v in s if ts <= t), default=0)
        if s and s[-1][1] > before:
            out[f"{p['node']}:{p['port']}"] = s[-1][1] - before
    return out


def test_dcqcn_off_on_one_switch_pauses_spread_and_hurt_a_victim(cc, incast, tmp_path):
    r = run("dcqcn-off-one-switch", cc.name, tmp_path)
    assert r["integrity_ok"] and r["lossless_drops"] == 0
    (ecn_off,) = r["events"]
    assert (ecn_off["kind"], ecn_off["node"], ecn_off["enabled"]) == ("ecn", "leaf3", False)
    a, b = r["phases"]["A"], r["phases"]["B"]
    assert a["to_s"] < ecn_off["t_s"] < b["from_s"], (a, ecn_off, b)  # phases apart from the switch
    b_pauses = _pauses_after(r, ecn_off["t_s"])
    incast_pauses = sum(p["pause_tx"] for p in incast["ports"])
    assert b["pauses"] >= 10 * max(1, a["pauses"], incast_pauses), (a, b, incast_pauses)
    assert {"leaf3:spine1", "leaf3:spine2"} & set(b_pauses), b_pauses  # leaf3 paused its spines
    assert {k for k in b_pauses if k.startswith("spine")}, b_pauses  # ... which paused others
    flows = {f["name"]: f for f in r["flows"]}
    assert all(f["spines"] == ["spine1" if f["name"].endswith(("p1", "p3")) else "spine2"]
               for f in r["flows"]), [(f["name"], f["spines"]) for f in r["flows"]]  # `via` held
    uplink = {(p["node"], p["port"]): p["tx_bytes"] for p in r["ports"] if p["tc"] == 3}
    for leaf in ("leaf1", "leaf2"):  # ... on the wire too: p1/p3 by spine1, p2/p4 by spine2
        assert min(uplink.get((leaf, "spine1"), 0), uplink.get((leaf, "spine2"), 0)) >= 2 * 24 << 20, uplink
    # Head-of-line blocking: the victim (decode3 -> decode2, handoffs at <= 160G) shares
    # spine2 -> leaf3, which leaf3 paused, but not the congested port; its own port
    # (leaf3 -> decode2) never filled, yet its throughput fell to 41-59 % of phase A
    # and its handoff p99 grew 1.4-6x (5 runs; once 77 % and 1.3x, when phase A's onset
    # hit it hard): it waited in the paused queue, which also marked it.
    assert r["pfc"]["paused_s"].get("spine2:leaf3:3", 0) > 0, r["pfc"]["paused_s"]
    own = [p for p in r["ports"] if (p["node"], p["port"], p["tc"]) == ("leaf3", "decode2", 3)]
    assert own and own[0]["max_queued"] < 1_000_000, own
    victim_a, victim_b = a["rates_bps"]["victim"], b["rates_bps"]["victim"]
    assert victim_b <= 0.85 * victim_a, (victim_a, victim_b)  # phase A's onset hurts it too
    tail_a, tail_b = a["handoffs"]["victim"]["p99_s"], b["handoffs"]["victim"]["p99_s"]
    assert tail_b > tail_a, (a["handoffs"], b["handoffs"])
    # Nothing lost, nothing reordered: no NAK, no go-back-N anywhere (RPS keeps veth in order)
    assert all(f["naks_rx"] == 0 and f["retransmitted_packets"] == 0 for f in r["flows"]), [
        (f["name"], f["naks_rx"], f["retransmitted_packets"]) for f in r["flows"]]
    assert flows["victim"]["integrity_ok"]
    # diagnose, from the counters alone: ECN off on leaf3 first, the pause storm it caused,
    # and the victim named as head-of-line blocked
    found = diagnosed(tmp_path, 13)
    assert (found[0]["kind"], found[0]["where"][0]) == ("ecn-off", "leaf3"), found[0]
    storm = next(f for f in found if f["kind"] == "pause-storm")
    assert storm["cause"].startswith("pause storm from leaf3:decode1") and "victim" in storm["cause"]
    assert not any(f["kind"] == "ecn-off" and f["where"][0] != "leaf3" for f in found), found


def test_dcqcn_overrides_reach_the_engines(incast, tmp_path):
    """A min rate above the fair share (150G of 400G, 4 senders) leaves DCQCN unable
    to resolve the incast: PFC has to hold it. Proves the topology's override is what
    the real engines run."""
    topo = yaml.safe_load(open("topologies/clos-2x4-cc.yaml"))
    topo["congestion"]["dcqcn"]["overrides"] = {"min_rate": "150G"}
    (tmp_path / "topo.yaml").write_text(yaml.safe_dump(topo))
    exp = yaml.safe_load(open("experiments/incast.yaml"))
    exp |= {"name": "incast-min-rate", "topology": str(tmp_path / "topo.yaml"), "steady_after": "1s",
            "flows": [f | {"size": "16MiB"} for f in exp["flows"]]}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(exp))
    name = f"{PREFIX}ovr"
    cli("run", str(tmp_path / "exp.yaml"), "--out", str(tmp_path / "out"), "--name", name,
        timeout=240)
    assert not leftovers(name)
    r = json.loads((tmp_path / "out" / "results.json").read_text())
    assert r["integrity_ok"] and r["lossless_drops"] == 0
    pauses = sum(p["pause_tx"] for p in r["ports"])
    assert pauses >= 10 * max(1, sum(p["pause_tx"] for p in incast["ports"])), pauses
    # diagnose: the senders' DCQCN hit its floor (150G of 400G) with CNPs still arriving
    found = diagnosed(tmp_path / "out", 13)
    floors = [f for f in found if f["kind"] == "dcqcn-off-host"]
    assert floors and all("stopped at the minimum rate, 38% of line rate" in f["cause"]
                          for f in floors), found


def _stalled(flow: dict, t0: float, t1: float) -> bool:
    """Half a second or more with nothing sent between t0 and t1."""
    zeros = [t for t, rate in flow["rate_series"] if t0 <= t <= t1 and rate == 0]
    return len(zeros) >= 5  # samples every 100 ms


def test_pause_storm_spreads_stalls_others_and_recovers(cc, tmp_path):
    r = run("pause-storm", cc.name, tmp_path)
    assert r["integrity_ok"] and r["lossless_drops"] == 0
    assert [e["kind"] for e in r["events"]] == ["drain", "drain"]
    paused = {k.split(":")[0] for k in r["pfc"]["paused_s"]}  # nodes whose egress was paused
    assert {"spine1", "spine2"} & paused, paused  # leaf3 paused its spines ...
    assert paused & {"leaf1", "leaf2"}, paused  # ... which paused the leaves upstream: it spread
    stuck_spines = {s for f in r["flows"] if f["dst"] == "decode1" for s in f["spines"]}
    assert stuck_spines == {"spine1", "spine2"}  # pinned with `via`: both spines get paused
    unrelated = next(f for f in r["flows"] if f["name"] == "unrelated")
    # decode2 kept draining, yet its flow stopped behind decode1's, until the backlog drained
    assert _stalled(unrelated, 1.8, 7.0)
    # diagnose names decode1 as the origin and the unrelated flow as its victim
    found = diagnosed(tmp_path, 13)
    assert found[0]["kind"] == "pause-storm" and "decode1 stopped draining" in found[0]["cause"]
    assert "unrelated" in found[0]["cause"].split("do not use")[1]
    assert not any(f["kind"] == "ecn-off" for f in found), found


def test_faults_scheduled_in_an_experiment_are_recorded_and_timed(clos_unnumbered, tmp_path):
    """On the session's clos-2x4 (the file's topology), running: the timeline heals what it
    failed. (That a run which brought its own lab up takes it down again is
    test_dcqcn_overrides_reach_the_engines' leftover check.)"""
    try:
        r = run("spine-failure", clos_unnumbered.name, tmp_path)
        left = faults.active(clos_unnumbered.plan)
    finally:
        if faults.active(clos_unnumbered.plan):  # the timeline did not heal it: the next test's lab
            cli("heal", clos_unnumbered.name, "--all", check=False)
    assert r["integrity_ok"]
    fail, heal = r["events"]
    assert (fail["action"], heal["action"]) == ("fail", "heal")
    assert fail["iso"] and heal["iso"] and fail["t_s"] < heal["t_s"]
    # a spine's links lose carrier: no timer waited for, so well under a third of clos-2x4's
    # 9 s BGP hold time (not "< 2 s", a loaded machine's speed; make bench measures it)
    assert fail["convergence"]["settled"] and fail["convergence"]["converge_s"] < 9 / 3
    assert fail["convergence"]["leaf_ecmp"]["leaf1"] == [1, 1]  # one spine left
    assert heal["convergence"]["settled"]
    assert not left  # nothing stays failed
    # an L3 fault that healed leaves nothing above info (from results.json)
    assert all(f["severity"] == "info" for f in diagnosed(tmp_path, 0))
