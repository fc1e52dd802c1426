"""rxe counters in the exporter: clos-2x4-rxe up with `--metrics`, a real Prometheus
scraping it, a real ib_write_bw from prefill1 to decode1; rxe's own sent/received
packet counters grow in the exporter and in PromQL, and a stopped guest reads
`rocelab_rxe_up 0` within the collector's timeout."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from emulator.metrics.collectors import rxe as rxe_collector
from emulator.rxe.hosts import running, vm_for

from ..conftest import cli, poll
from ..test_telemetry import _get, by, query, run_prometheus, samples
from .conftest import NAME

N = 200


@pytest.fixture(scope="module")
def url(lab):
    return lab.status()["metrics"]["url"]


@pytest.fixture(scope="module")
def prometheus(url, tmp_path_factory):
    yield from run_prometheus(url, tmp_path_factory.mktemp("prometheus"))


def listening(vm, port=18515) -> bool:
    rc, out, _ = vm.exec(["ss", "-Hltn"], timeout=10)
    return rc == 0 and f":{port} " in out


def test_ib_write_bw_grows_the_rxe_counters(lab, url, prometheus):
    def rxe(m: str, node: str) -> float:
        return by(samples(url).get(f"rocelab_rxe_{m}_total", {}), node=node)

    # Prometheus has the rxe series before any traffic (both guests up)
    up = poll(lambda: len(query(prometheus, f'rocelab_rxe_up{{lab="{NAME}"}} == 1')) == 2 or None,
              timeout=20, interval=0.5, what="rocelab_rxe_up == 1 for both guests in Prometheus")
    assert up
    before = {n: (rxe("sent_pkts", n), rxe("rcvd_pkts", n)) for n in ("prefill1", "decode1")}
    send_err = rxe("send_err", "prefill1")  # the package's lab: other modules' traffic came first
    server = vm_for(lab.plan, lab.plan.node("decode1"))
    argv = ["ib_write_bw", "-d", "rxe0", "-x", "1", "-F", "-s", "65536", "-n", str(N)]
    job = server.spawn(argv)
    try:
        poll(lambda: listening(server), timeout=30, what="ib_write_bw listening")
        res = cli("exec", NAME, "prefill1", "--", *argv, lab.plan.node("decode1").address)
        assert f"65536      {N}" in res.stdout, res.stdout
        assert server.wait(job, timeout=30) == 0
    finally:
        server.kill(job)
    after = {n: (rxe("sent_pkts", n), rxe("rcvd_pkts", n)) for n in ("prefill1", "decode1")}
    # 200 x 64 KiB in packets of at most 4096 (the largest RoCE MTU): >= 3,200 requests out
    assert after["prefill1"][0] - before["prefill1"][0] >= N * 16
    assert after["decode1"][1] - before["decode1"][1] >= N * 16
    assert after["decode1"][0] > before["decode1"][0]  # ACKs (coalesced) went back
    assert after["prefill1"][1] > before["prefill1"][1]
    assert rxe("send_err", "prefill1") == send_err
    # and Prometheus saw the counter move
    grown = poll(lambda: query(prometheus, 'increase(rocelab_rxe_sent_pkts_total{lab="'
                                           f'{NAME}",node="prefill1"}}[1m]) > {N * 8}') or None,
                 timeout=20, interval=0.5, what="Prometheus: rxe sent_pkts increase")
    assert grown


def test_a_stopped_guest_reads_down_without_stalling_the_scrape(lab, url):
    pid = running(NAME)["decode1"]
    t0 = time.monotonic()
    samples(url)
    base = time.monotonic() - t0  # the same scrape with every guest answering, this run
    os.kill(pid, signal.SIGSTOP)  # a hung guest: its agent socket accepts, nothing answers
    try:
        t0 = time.monotonic()
        got = samples(url)
        took = time.monotonic() - t0
        assert by(got["rocelab_rxe_up"], node="decode1") == 0
        assert by(got["rocelab_rxe_up"], node="prefill1") == 1
        # the hung guest costs the rxe collector's budget (with its 0.2 s grace), not a stall
        assert took < base + 2 * (rxe_collector.TIMEOUT_S + 0.2), (took, base)
        assert "rocelab_bgp_daemon_up" in got  # the rest of the scrape is intact
    finally:
        os.kill(pid, signal.SIGCONT)
    assert Path(f"/proc/{pid}").exists()
    poll(lambda: by(samples(url)["rocelab_rxe_up"], node="decode1") == 1, timeout=15,
         what="decode1 answers again after SIGCONT")
    _get(url)
