"""`up --metrics` end to end on one congestion lab: the exporter comes up with the lab
(root namespace, loopback, a free port), transfers fill the latency histograms and the
per-flow series, a fault and an experiment action show while in force and go when lifted,
and `down` stops the exporter by its PID and leaves nothing. A failed `up` takes its
exporter with it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from emulator import procs
from emulator.experiment.actions import Timeline
from emulator.experiment.spec import Action

from .conftest import PREFIX, ROCELAB, Lab, cli, leftovers, poll

TOPOLOGY = "topologies/clos-2x4-cc.yaml"
FLOW = "prefill1->decode1"


@pytest.fixture(scope="module")
def lab():
    lab_ = Lab(TOPOLOGY, f"{PREFIX}tev")
    try:
        res = lab_.up("--metrics", "127.0.0.1:0", "--json")
        lab_.metrics = json.loads(res.stdout)["metrics"]
        yield lab_
    finally:
        cli("down", lab_.name, check=False)


def scrape(url: str) -> dict[str, dict[tuple, float]]:
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted((k, v) for k, v in s.labels.items()
                                                    if k != "lab"))] = s.value
    return out


def pick(series: dict[tuple, float], **match: str) -> dict[tuple, float]:
    return {k: v for k, v in series.items() if all(dict(k).get(a) == b for a, b in match.items())}


def buckets(m: dict, name: str, **match: str) -> list[tuple[float, float]]:
    """(le, count) of one histogram, in bound order."""
    return sorted((float(dict(k)["le"]), v) for k, v in pick(m[f"{name}_bucket"], **match).items())


def test_up_started_the_exporter_in_the_root_namespace_on_loopback(lab):
    info, pid = lab.metrics, lab.metrics["pid"]
    assert info["url"].startswith("http://127.0.0.1:") and not info["url"].endswith(":0/metrics")
    assert procs.process_tag(pid) == lab.name  # tagged: `down` finds it even after a crash
    assert os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")  # root ns
    assert os.getsid(pid) == pid  # a session of its own: Ctrl-C at up's terminal is not for it
    m = scrape(info["url"])
    assert set(m["rocelab_scrape_collector_success"].values()) == {1.0}
    assert (("collector", "events"),) in m["rocelab_scrape_collector_success"]
    st = lab.status()
    assert st["metrics"]["url"] == info["url"] and st["metrics"]["running"]


def test_transfers_fill_the_histograms_and_one_flow_series(lab):
    url = lab.metrics["url"]
    # a transfer long enough (~1.5 s at the lab's 100 Mbit/s) to see its QPs labelled
    slow = subprocess.Popen([ROCELAB, "transfer", lab.name, "--src", "prefill1", "--dst",
                             "decode1", "--size", "16MiB", "--qps", "2", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    live = poll(lambda: pick(scrape(url).get("rocelab_qp_sent_bytes_total", {}), flow=FLOW),
                timeout=20, interval=0.1, what="per-QP series labelled with their flow")
    assert {(dict(k)["src"], dict(k)["dst"]) for k in live} == {("prefill1", "decode1")}
    out, err = slow.communicate(timeout=60)
    assert slow.returncode == 0, err
    first = json.loads(out)
    second = json.loads(cli("transfer", lab.name, "--src", "prefill1", "--dst", "decode1",
                            "--size", "2MiB", "--json").stdout)
    m = scrape(url)
    done = m["rocelab_engine_transfers_total"][(("node", "prefill1"),)]
    assert done == 2
    for name, key in (("rocelab_transfer_duration_seconds", "duration_s"),
                      ("rocelab_kv_handoff_seconds", "handoff_s")):
        b = buckets(m, name, node="prefill1")
        counts = [n for _, n in b]
        assert counts == sorted(counts) and b[-1][0] == float("inf"), (name, b)
        assert counts[-1] == m[f"{name}_count"][(("node", "prefill1"),)] == done
        assert m[f"{name}_sum"][(("node", "prefill1"),)] == pytest.approx(
            first[key] + second[key], rel=0.01, abs=1e-3)
    assert not pick(m.get("rocelab_qp_sent_bytes_total", {}), node="prefill1")  # QPs gone ...
    sent = pick(m["rocelab_flow_sent_bytes_total"], flow=FLOW, node="prefill1")
    got = pick(m["rocelab_flow_received_bytes_total"], flow=FLOW, node="decode1")
    assert len(sent) == len(got) == 1  # ... one series per flow and end, whatever the QPNs
    assert list(got.values())[0] == (16 + 2) << 20 <= list(sent.values())[0]
    assert pick(m["rocelab_flow_transfers_total"], flow=FLOW, node="prefill1") == {
        (("dst", "decode1"), ("flow", FLOW), ("node", "prefill1"), ("src", "prefill1")): 2.0}
    pfc = buckets(m, "rocelab_pfc_reaction_seconds", event="xoff")
    assert pfc[-1][1] == m["rocelab_pfc_pauses_total"][()]  # lossless and quiet: 0 and 0


def test_a_fault_shows_while_in_force(lab):
    url = lab.metrics["url"]
    cli("fail", lab.name, "link", "leaf2", "spine2", "--loss", "1%")
    want = (("how", "loss 1%"), ("kind", "link"), ("target", "leaf2-spine2"))
    assert scrape(url)["rocelab_fault_active"] == {want: 1.0}
    cli("heal", lab.name, "--all")
    m = scrape(url)
    assert not m.get("rocelab_fault_active")
    assert m["rocelab_fault_events_total"] == {(("action", "fail"),): 1.0,
                                               (("action", "heal"),): 1.0}


def test_an_experiment_action_shows_until_the_run_restores_the_lab(lab):
    url = lab.metrics["url"]
    action = Action.model_validate({"at": "0s", "ecn": {"node": "leaf3", "enabled": False}})
    timeline = Timeline(lab.plan, [action], time.monotonic())
    timeline.start()
    try:
        timeline.finish(time.monotonic() + 10)
        assert "error" not in timeline.events[0], timeline.events
        assert scrape(url)["rocelab_action_active"] == {
            (("kind", "ecn"), ("setting", "off"), ("target", "leaf3")): 1.0}
    finally:
        timeline.restore()  # ECN back on leaf3, as the topology declares
    m = scrape(url)
    assert not m.get("rocelab_action_active")
    assert m["rocelab_action_events_total"] == {(("kind", "ecn"),): 1.0}


def test_down_stops_the_exporter_by_pid_and_leaves_nothing(lab):
    pid, url = lab.metrics["pid"], lab.metrics["url"]
    out = lab.down().stdout
    assert "run dir" in out
    assert not os.path.exists(f"/proc/{pid}") or procs.process_tag(pid) != lab.name
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2)
    assert not leftovers(lab.name)


def test_a_failed_up_takes_its_exporter_with_it():
    name = f"{PREFIX}tevx"
    with socket.socket() as taken:  # a port in use: refused before anything exists
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        res = cli("up", TOPOLOGY, "--name", name, "--metrics", f"127.0.0.1:{port}", check=False)
    assert res.returncode == 1 and "cannot listen" in res.stderr, res.stderr
    assert not leftovers(name)
    # routing cannot converge in 1 ms: up rolls back after the exporter started
    res = cli("up", TOPOLOGY, "--name", name, "--metrics", "127.0.0.1:0", "--timeout", "0.001",
              check=False)
    try:
        assert res.returncode != 0, res.stdout
        assert not leftovers(name), res.stderr
    finally:
        cli("down", name, check=False)
