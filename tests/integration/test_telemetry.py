"""Telemetry end to end on one congestion lab: the exporter under load, a real
Prometheus scraping it, counters that agree with each other, the live view.
(The incast experiment's report with every picture: test_experiments.py, on its run.)

Prometheus is Debian's `prometheus` package, started here on loopback with a
temporary config and storage, and killed by PID.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import socket
import statistics
import struct
import subprocess
import termios
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from emulator.perftest import report

from .conftest import PREFIX, ROCELAB, cli, make_lab, poll

PROMETHEUS = Path("/usr/bin/prometheus")
PICTURES = ("flow_rates.png", "queue_depth.png", "pause_timeline.png", "latency_cdf.png",
            "ecmp_spread.png", "topology.png", "topology.svg")


@pytest.fixture(scope="module")
def cc():
    yield from make_lab("topologies/clos-2x4-cc.yaml", f"{PREFIX}tel")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()  # by PID: only the process this test started
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@pytest.fixture(scope="module")
def exporter(cc):
    port = _free_port()
    proc = subprocess.Popen([ROCELAB, "metrics", cc.name, "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        poll(lambda: proc.poll() is None and _answers(url), timeout=20, what=f"exporter at {url}")
        yield url
    finally:
        _stop(proc)


def _answers(url: str) -> bool:
    try:
        return "rocelab_" in _get(url)
    except OSError:
        return False


@pytest.fixture(scope="module")
def prometheus(exporter, tmp_path_factory):
    yield from run_prometheus(exporter, tmp_path_factory.mktemp("prometheus"))


def run_prometheus(exporter: str, d: Path):
    """A real Prometheus scraping `exporter` every second; yields its base URL."""
    if not PROMETHEUS.exists():
        pytest.fail("prometheus is not installed: run `make setup` (Debian package prometheus)")
    target = urllib.parse.urlsplit(exporter).netloc
    (d / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n  - job_name: rocelab\n    scrape_timeout: 900ms\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n")
    port = _free_port()
    proc = subprocess.Popen([str(PROMETHEUS), f"--config.file={d / 'prometheus.yml'}",
                             f"--storage.tsdb.path={d / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=open(d / "log", "w"))
    base = f"http://127.0.0.1:{port}"
    try:
        poll(lambda: proc.poll() is None and _ready(base), timeout=30, interval=0.2,
             what=f"prometheus ready at {base} (log: {d / 'log'})")
        yield base
    finally:
        _stop(proc)


def _ready(base: str) -> bool:
    try:
        return "Ready" in _get(base + "/-/ready", timeout=2)
    except OSError:
        return False


def query(base: str, promql: str) -> list[dict]:
    reply = json.loads(_get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})))
    assert reply["status"] == "success", reply
    return reply["data"]["result"]


def samples(url: str) -> dict[str, dict[tuple, float]]:
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(_get(url)):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def by(values: dict[tuple, float], **match: str) -> float:
    return sum(v for k, v in values.items() if all(dict(k).get(a) == b for a, b in match.items()))


def _timed_get(exporter) -> tuple[float, str]:
    t0 = time.perf_counter()
    text = _get(exporter)
    return time.perf_counter() - t0, text


LOAD_RATIO = 10  # a scrape that waited for the transfers would take their seconds: 100x and more


def test_a_scrape_under_load_stays_within_budget(cc, exporter, tmp_path):
    """Scrapes while transfers run take a bounded multiple of the same exporter's idle
    scrapes, measured just before in this run (not an absolute time: that is the machine's)."""
    idle = [_timed_get(exporter)[0] for _ in range(5)]
    kv = subprocess.Popen([ROCELAB, "kv", cc.name, "--pairs", "prefill1:decode1,prefill2:decode1,"
                           "prefill3:decode1", "--tokens", "96", "--requests", "3",
                           "--concurrency", "3", "--qps", "2", "--out", str(tmp_path / "kv")],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    poll(lambda: "rocelab_engine_transfer_size_bytes{" in _get(exporter), timeout=30,
         interval=0.2, what="transfers in flight")
    wall, server = [], []
    while kv.poll() is None and len(wall) < 12:
        took, text = _timed_get(exporter)
        wall.append(took)
        fam = next(f for f in text_string_to_metric_families(text)
                   if f.name == "rocelab_scrape_collector_duration_seconds")
        server.append(max(s.value for s in fam.samples))
        time.sleep(0.2)  # pacing the scrapes, as Prometheus would
    out, err = kv.communicate(timeout=120)
    assert kv.returncode == 0, err
    p50, top, slowest = statistics.median(wall), max(wall), statistics.median(server)
    base = statistics.median(idle)
    print(f"scrape under load: {len(wall)} scrapes, HTTP wall p50 {p50 * 1e3:.0f} ms max "
          f"{top * 1e3:.0f} ms (idle p50 {base * 1e3:.0f} ms); slowest collector p50 "
          f"{slowest * 1e3:.0f} ms")
    assert len(wall) >= 5 and p50 < LOAD_RATIO * base, (wall, idle)
    for name in PICTURES + ("results.json", "report.md", "report.html"):
        assert (tmp_path / "kv" / name).stat().st_size > 0, name  # kv --out wrote its report


def test_prometheus_answers_promql_about_the_fabric(cc, prometheus):
    def series(promql: str) -> list[dict]:
        return poll(lambda: query(prometheus, promql), timeout=20, interval=0.5, what=promql)

    sent = series('sum(rocelab_qdisc_sent_bytes_total{node="spine1"}) > 1e6')
    assert float(sent[0]["value"][1]) > 1e6
    est = {r["metric"]["node"]: float(r["value"][1])
           for r in series("rocelab_bgp_sessions_established")}
    assert est == {"spine1": 4, "spine2": 4, "leaf1": 2, "leaf2": 2, "leaf3": 2, "leaf4": 2}
    assert series("sum(rocelab_dataplane_ce_marked_packets_total) > 0")
    assert series('sum(rocelab_engine_qp_cnps_received_total{node=~"prefill.*"}) > 0')
    assert series('min(rocelab_bgp_ecmp_min_paths{node=~"leaf.*"}) == 2')
    ok = series("rocelab_scrape_collector_success")
    assert {r["metric"]["collector"]: r["value"][1] for r in ok} == dict.fromkeys(
        ("lab", "interface", "qdisc", "dataplane", "bgp", "engine", "events"), "1")
    assert series('up{job="rocelab"} == 1')
    dashboard = json.loads(Path("docs/grafana-dashboard.json").read_text())
    exprs = ([t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
             + [a["expr"] for a in dashboard["annotations"]["list"]])
    for expr in exprs:  # every Grafana expression (panels, annotations) is valid PromQL
        query(prometheus, expr.replace("$lab", cc.name).replace("$__rate_interval", "10s")
              .replace("$flow", ".*"))
    # the kv run above is over: its histogram no longer moves, so the quantile of the totals
    handoff = series("histogram_quantile(0.5, sum by (node, le) (rocelab_kv_handoff_seconds_bucket)) > 0")
    assert {r["metric"]["node"] for r in handoff} <= {h.name for h in cc.plan.hosts}


def test_counters_agree_with_each_other(cc, exporter):
    """Host port bytes vs its leaf port within 1 %; CE marked by switches == CE that
    reached the hosts (BPF ingress count at each host's eth0) == CE the hosts' engines saw."""
    def settled():
        m = samples(exporter)
        switch_ce = sum(v for k, v in m["rocelab_dataplane_ce_marked_packets_total"].items()
                        if dict(k)["node"].startswith(("spine", "leaf")))
        host_ce = sum(v for k, v in m["rocelab_dataplane_rx_ce_packets_total"].items()
                      if dict(k)["port"] == "eth0")
        engine_ce = sum(m.get("rocelab_engine_qp_ce_received_packets_total", {}).values())
        # Engines see every marked frame that reaches a live QP; a frame for a QP
        # already torn down after its transfer (a late retransmission) is not theirs.
        engines_agree = host_ce - max(2, host_ce // 100) <= engine_ce <= host_ce
        seen.update(switch=switch_ce, host=host_ce, engines=engine_ce)
        return (m, switch_ce, host_ce, engine_ce) if switch_ce == host_ce and engines_agree else None

    seen: dict = {}

    try:
        m, switch_ce, host_ce, engine_ce = poll(
            settled, timeout=15, interval=0.5,
            what="CE marked == CE at host ports, and CE seen by engines within 1 % of it")
    except AssertionError as e:
        raise AssertionError(f"{e}; last counts {seen}") from None
    assert switch_ce > 0 and engine_ce > 0
    tx, rx = m["rocelab_interface_tx_bytes_total"], m["rocelab_interface_rx_bytes_total"]
    for host in cc.plan.hosts:
        sent = by(tx, node=host.name, port="eth0")
        got = by(rx, node=host.leaf, port=host.name)
        assert sent > 0 and abs(sent - got) <= 0.01 * sent, (host.name, sent, got)
    decode_ce = by(m["rocelab_dataplane_rx_ce_packets_total"], node="decode1", port="eth0")
    assert decode_ce > 0 and by(m["rocelab_engine_qp_cnps_sent_total"], node="decode1") > 0


def test_top_prints_a_frame(cc):
    out = cli("top", cc.name, "--once", "--interval", "0.5").stdout
    for needle in ("hottest ports", "peak queue", "BGP sessions 16/16 established", "transfers"):
        assert needle in out, out


def test_top_redraws_every_second_and_quits_on_q(cc):
    """On a terminal (a pty, as over SSH): frames keep coming; `q` ends it at once."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([ROCELAB, "top", cc.name], stdin=slave, stdout=slave, stderr=slave,
                            env=dict(os.environ, TERM="xterm-256color"), start_new_session=True)
    os.close(slave)
    seen = bytearray()

    def frames(n: int) -> bool:
        while select.select([master], [], [], 0.1)[0]:
            seen.extend(os.read(master, 1 << 16))
        return seen.count(b"hottest ports") >= n

    try:
        poll(lambda: frames(3), timeout=20, interval=0.1, what="three frames of rocelab top")
        os.write(master, b"q")
        assert proc.wait(5) == 0
    finally:
        if proc.poll() is None:
            _stop(proc)
        os.close(master)


def test_graph_draws_the_topology_without_root(tmp_path):
    res = subprocess.run([ROCELAB, "graph", "topologies/clos-2x4-cc.yaml", "-o",
                          str(tmp_path / "fabric.svg")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "spine1" in (tmp_path / "fabric.svg").read_text()


def test_perftest_on_a_congestion_lab_gives_every_figure_real_equivalent(cc):
    """Under time dilation D, perftest's figures are wall figures: rates x D and
    times / D give the real fabric's, for every column."""
    d = float(cc.plan.dilation)
    res = cli("perftest", cc.name, "write_bw", "--src", "prefill1", "--dst", "decode2",
              "-s", "65536", "-n", "100", "--json", timeout=120)
    row = json.loads(res.stdout)["client"]["rows"][0]
    assert row["bw_avg"] > 0
    for k in ("bw_peak", "bw_avg"):
        assert row[f"real_{k}_gbps"] == pytest.approx(row[k] * 2**20 * 8 * d / 1e9)
    assert row["real_msg_rate_mpps"] == pytest.approx(row["msg_rate"] * d)
    res = cli("perftest", cc.name, "write_lat", "--src", "prefill1", "--dst", "decode2",
              "-n", "100", timeout=120)
    table = res.stdout.split("real-equivalent (time dilation", 1)[1].splitlines()
    assert "t_min[usec]" in table[1] and "99.9%[usec]" in table[1]
    wall = [r for r in report.parse(res.stdout)][0]
    real = [float(x) for x in table[2].split()[2:]]
    assert real == pytest.approx([v / d for v in (wall.t_min, wall.t_max, wall.t_typical,
                                                  wall.t_avg, wall.t_stdev, wall.p99,
                                                  wall.p999)], rel=1e-3, abs=1e-4)
