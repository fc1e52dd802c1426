"""The rxe collector against fake guests: the real agent's Session serving a fake
hw_counters directory over the agent sockets, a guest that never answers, and one
whose QEMU is gone. A scrape never waits much longer than the collector's timeout."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from emulator.metrics import scrape
from emulator.metrics.collectors import rxe as rxe_collector
from emulator.metrics.model import Kind, index
from emulator.plan import compile_plan
from emulator.rxe import agent, hosts
from emulator.spec import parse

SPEC = {"name": "t", "spines": 2, "leaves": 4,
        "hosts": {"per_leaf": 2, "kind": {"prefill1": "rxe", "decode1": "rxe", "decode2": "rxe"}}}
COUNTERS = {"sent_pkts": 1200, "rcvd_pkts": 640, "send_err": 0, "ack_deferred": 3,
            "lifespan": 10, "brand_new_counter": 7}


def serve(path, tmp_path, answer: bool) -> socket.socket:
    """A unix socket like QEMU's chardev: the real agent behind it, or a silent guest."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(4)

    def accept():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            if not answer:
                continue  # accepted, never read: a hung guest
            session = agent.Session(conn.fileno(), agent.Jobs())
            lines = agent.Lines()

            def loop(conn=conn, session=session, lines=lines):
                while data := conn.recv(65536):
                    for line in lines.feed(data):
                        session.handle(line)

            threading.Thread(target=loop, daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return srv


@pytest.fixture
def lab(tmp_path, monkeypatch):
    plan = compile_plan(parse(SPEC, "t.yaml"), "t.yaml")
    sysfs = tmp_path / "hw_counters"
    sysfs.mkdir()
    for k, v in COUNTERS.items():
        (sysfs / k).write_text(f"{v}\n")
    real_counters = agent.counters
    monkeypatch.setattr(agent, "counters", lambda: real_counters(sysfs))
    real_vm_for = hosts.vm_for

    def vm_for(plan_, host):
        vm = real_vm_for(plan_, host)
        vm.run_dir = tmp_path / host.name
        return vm

    monkeypatch.setattr(hosts, "vm_for", vm_for)
    # prefill1 answers, decode1 hangs, decode2's QEMU is gone (a PID that does not exist)
    monkeypatch.setattr(hosts, "running", lambda lab: {"prefill1": os.getpid(),
                                                       "decode1": os.getpid(), "decode2": 2**22 + 1})
    servers = []
    for name, answer in (("prefill1", True), ("decode1", False)):
        (tmp_path / name).mkdir()
        servers.append(serve(tmp_path / name / "agent0.sock", tmp_path, answer))
    yield plan
    for s in servers:
        s.close()


def test_counters_up_and_a_bounded_scrape(lab, monkeypatch):
    monkeypatch.setattr(rxe_collector, "TIMEOUT_S", 0.5)
    collector = rxe_collector.Collector(lab)
    assert collector.applies()
    t0 = time.monotonic()
    raw = collector.fetch()
    took = time.monotonic() - t0
    collector.close()
    assert took < 1.5, took  # the hung guest costs the timeout, not the channel's 10-30 s
    assert raw["prefill1"]["counters"]["sent_pkts"] == 1200
    assert "counters" not in raw["decode1"] and "counters" not in raw["decode2"]
    assert raw["decode2"]["error"] == "no guest running"

    fams = index(rxe_collector.Collector.parse(raw, lab))
    up = {dict(lb)["node"]: v for lb, v in fams["rocelab_rxe_up"].samples}
    assert up == {"prefill1": 1.0, "decode1": 0.0, "decode2": 0.0}
    sent = fams["rocelab_rxe_sent_pkts_total"]
    assert sent.kind is Kind.COUNTER and sent.samples == [({"lab": "t", "node": "prefill1"}, 1200.0)]
    assert "handed to the network" in sent.help
    assert fams["rocelab_rxe_brand_new_counter_total"].help == "rxe hw_counters/brand_new_counter."
    assert "rocelab_rxe_lifespan_total" not in fams  # a setting, not a counter


def test_the_scrape_reports_the_collector_and_engine_labs_skip_it(lab, monkeypatch):
    monkeypatch.setattr(rxe_collector, "TIMEOUT_S", 0.5)
    scraper = scrape.Scraper(lab)
    try:
        s = scraper.scrape()
    finally:
        scraper.close()
    assert s.outcomes["rxe"].error is None and s.seconds < 1.5
    assert "rocelab_rxe_rcvd_pkts_total" in index(s.families)
    engine_only = compile_plan(parse({"name": "e", "spines": 2, "leaves": 4,
                                      "hosts": {"per_leaf": 2}}, "e.yaml"), "e.yaml")
    assert not rxe_collector.Collector(engine_only).applies()
