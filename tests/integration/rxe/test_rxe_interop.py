"""Interop: real perftest on an rxe host (Linux Soft-RoCE in a QEMU guest) against
rocelab's engine on an engine host, across the fabric, in both roles; then the same
under 1 % loss on the rxe host's uplinks (go-back-N between rxe and the engine, both
directions), with every RoCE packet captured and checked (ICRC, tshark's expert info).

clos-2x4-rxe: prefill1 (leaf1) and decode1 (leaf3) are rxe guests; prefill2 (leaf1),
prefill3 (leaf2) are engine hosts.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from emulator.engine import client as engine
from emulator.errors import ExitCode
from emulator.perftest import report
from emulator.roce.icrc import check_icrc
from emulator.roce.pcap import read_pcap

from ..conftest import ROCELAB, cli, poll, rxe_vm, wait_for_line
from .conftest import NAME

PERFTEST_PORT = 18515
vm = rxe_vm


def addr(lab_, host) -> str:
    return lab_.plan.node(host).address


def real_argv(test: str, size: int, iters: int, qps: int) -> list[str]:
    return [f"ib_{test}", "-d", "rxe0", "-x", "1", "-F", "-s", str(size), "-n", str(iters),
            "-q", str(qps)]


def engine_server(test: str, on: str, size: int, iters: int, qps: int) -> subprocess.Popen:
    """`rocelab perftest --server` on an engine host, returned once it waits for a client
    (within 60 s: its output is read against a deadline, never to an EOF that may not come)."""
    proc = subprocess.Popen([ROCELAB, "perftest", NAME, test, "--server", "--on", on, "-s",
                             str(size), "-n", str(iters), "-q", str(qps)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_line(proc, "waiting for a client", 60)  # said on stderr; the report on stdout
    except AssertionError:
        proc.kill()
        proc.wait(10)
        raise
    return proc


def one_row(text: str):
    rows = report.parse(text)
    assert len(rows) == 1, text
    return rows[0]


def engine_received(lab_, host: str) -> int:
    """RoCE datagrams the engine on `host` has received (0 before it runs)."""
    node = lab_.plan.node(host)
    engine.ensure_engines(lab_.plan, [node])
    return engine.stats(lab_.plan, node)["transport"]["rx_datagrams"]


def real_client_to_engine(lab_, test, size, iters, qps, server_on="prefill3"):
    """Returns the client's and the server's rows, and the datagrams the engine received."""
    before = engine_received(lab_, server_on)
    server = engine_server(test, server_on, size, iters, qps)
    try:
        res = cli("exec", NAME, "prefill1", "--",
                  *real_argv(test, size, iters, qps), addr(lab_, server_on), timeout=180)
        out, err = server.communicate(timeout=60)
    finally:
        server.kill()
    assert server.returncode == 0, err
    return one_row(res.stdout), one_row(out), engine_received(lab_, server_on) - before


def engine_client_to_real(lab_, test, size, iters, qps, src="prefill2"):
    """Returns the engine's and the real server's rows, and the packets rxe accepted."""
    host = vm(lab_, "decode1")
    before = host.counters().get("rcvd_pkts", 0)
    job = host.spawn(real_argv(test, size, iters, qps))
    try:
        poll(lambda: f":{PERFTEST_PORT} " in host.exec(["ss", "-Hltn"], timeout=10)[1],
             timeout=30, what=f"ib_{test} listening on decode1")
        res = cli("perftest", NAME, test, "--src", src, "--dst", "decode1", "-s", str(size),
                  "-n", str(iters), "-q", str(qps), timeout=180)
        assert host.wait(job, timeout=60) == 0
        out, err = host.read(job)
    finally:
        host.kill(job)
    return one_row(res.stdout), one_row(out), host.counters()["rcvd_pkts"] - before


@pytest.mark.parametrize("test,size,iters,qps", [
    ("write_bw", 4096, 500, 1), ("write_bw", 65536, 200, 2),
    ("read_bw", 1000, 500, 1), ("read_bw", 65536, 200, 2), ("send_bw", 4096, 300, 1)])
def test_real_perftest_client_with_an_engine_server(lab, test, size, iters, qps):
    client, server, received = real_client_to_engine(lab, test, size, iters, qps)
    assert (client.size, client.iters) == (size, iters * qps)  # perftest counts over all QPs
    # The data arrived (perftest's rows only echo the arguments): at least one datagram per
    # message (a WRITE or SEND per iteration, or a READ request) reached the engine.
    assert received >= iters * qps, received
    # Not `client.bw_avg > 0`: perftest times with the guest's TSC, which under TCG now
    # and then reads 0.00 for a run that did move the data (seen once in ~20 runs).
    if test != "send_bw":  # write/read: the server prints the figures the client sent it
        assert (server.bw_avg, server.bw_peak) == (client.bw_avg, client.bw_peak)


@pytest.mark.parametrize("test,size,iters,qps", [
    ("write_bw", 65536, 200, 2), ("read_bw", 1000, 500, 1), ("read_bw", 65536, 200, 2),
    ("send_bw", 4096, 300, 1)])
def test_engine_client_with_a_real_perftest_server(lab, test, size, iters, qps):
    mine, theirs, accepted = engine_client_to_real(lab, test, size, iters, qps)
    assert (mine.size, mine.iters) == (size, iters * qps) and mine.bw_avg > 0.5
    assert theirs.size == size and theirs.iters == iters * qps
    assert accepted >= iters * qps, accepted  # rxe's own count: one packet per message at least
    if test != "send_bw":
        assert theirs.bw_avg == mine.bw_avg  # the real server printed the engine's report


def test_a_perftest_run_that_fails_exits_8_in_one_line(lab):
    """No perftest server on the rxe host: the engine's client cannot connect, and
    `rocelab perftest` says so on one line with the transfer-failed code."""
    res = cli("perftest", NAME, "write_bw", "--src", "prefill2", "--dst", "decode1",
              "-n", "10", check=False, timeout=60)
    assert res.returncode == ExitCode.TRANSFER_FAILED, res.stderr
    assert res.stderr.count("\n") == 1
    assert f"cannot reach a perftest server at {addr(lab, 'decode1')}:18515" in res.stderr


def test_engine_and_rxe_numbers_are_comparable(lab):
    """The same write_bw, engine->engine and engine->rxe: the rxe guest (TCG) is the
    slower end, but both are real transfers of the same shape: same order of magnitude
    or the engine side is faster; never zero."""
    to_engine = cli("perftest", NAME, "write_bw", "--src", "prefill2", "--dst", "prefill3",
                    "-s", "65536", "-n", "200", "--json", timeout=120)
    eng = json.loads(to_engine.stdout)["client"]["rows"][0]["bw_avg"]
    mine, _, _ = engine_client_to_real(lab, "write_bw", 65536, 200, 1)
    assert eng > 0 and mine.bw_avg > 0
    assert mine.bw_avg < eng * 5  # an rxe peer is not faster than the engine by far


def _rxe_counters(lab_, host):
    return vm(lab_, host).counters()


def test_go_back_n_between_rxe_and_the_engine_under_loss(lab, tmp_path):
    """1 % loss on both of leaf1's uplinks. rxe (prefill1) -> engine (prefill3) WRITEs
    lose packets: the engine NAKs, rxe goes back. Engine (prefill2) -> rxe (decode1)
    WRITEs and 1000-byte READs lose packets: rxe NAKs or the engine times out, and
    the engine goes back; the READs stay within rxe's 128 READ resources (ORD), which
    is what used to kill the QP. Every captured RoCE packet has a valid ICRC."""
    pcap = tmp_path / "leaf1-prefill1.pcap"
    pcap2 = tmp_path / "leaf1-prefill2.pcap"
    for spine in ("spine1", "spine2"):
        cli("fail", NAME, "link", "leaf1", spine, "--loss", "1%")
    before = {h: _rxe_counters(lab, h) for h in ("prefill1", "decode1")}
    caps = [subprocess.Popen([ROCELAB, "capture", NAME, "leaf1", port, "--count", "0",
                              "--duration", "120s", "--filter", "udp port 4791", "-w", str(f)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for port, f in (("prefill1", pcap), ("prefill2", pcap2))]
    try:
        for cap in caps:  # said once tcpdump listens (not a sleep that may be too short)
            wait_for_line(cap, "capturing", 30)
        real_client_to_engine(lab, "write_bw", 4096, 2000, 1)
        engine_client_to_real(lab, "write_bw", 4096, 2000, 1)
        engine_client_to_real(lab, "read_bw", 1000, 2000, 1)
    finally:
        try:
            for cap in caps:
                cap.send_signal(2)
            for cap in caps:
                cap.wait(timeout=30)
        finally:  # heal even if a capture did not stop in time: the package's lab is shared
            for cap in caps:
                if cap.poll() is None:
                    cap.kill()  # by PID: the capture this test started
                    cap.wait(timeout=30)
            cli("heal", NAME, "--all")
    after = {h: _rxe_counters(lab, h) for h in ("prefill1", "decode1")}
    grew = {h: {k: after[h][k] - before[h].get(k, 0) for k in after[h]
                if isinstance(after[h][k], int)} for h in after}
    print(f"rxe counters grown under loss: {grew}")
    # rxe as requester saw the engine's NAKs (sequence errors) or timed out and went back
    assert grew["prefill1"]["rcvd_seq_err"] + grew["prefill1"]["completer_retry_err"] > 0, grew
    # rxe as responder saw gaps and duplicates from the engine's go-back-N
    assert grew["decode1"]["out_of_seq_request"] + grew["decode1"]["duplicate_request"] > 0, grew
    assert grew["prefill1"]["retry_exceeded_err"] == grew["decode1"]["retry_exceeded_err"] == 0
    frames = 0
    for f in (pcap, pcap2):
        for rec in read_pcap(Path(f)):
            frames += 1
            assert check_icrc(rec.data[14:]), f"bad ICRC in {f.name} frame {frames}"
    assert frames > 4000
    print(f"{frames} RoCE frames captured, every ICRC valid")
    for f in (pcap, pcap2):
        expert = subprocess.run(["tshark", "-r", str(f), "-Y", "_ws.expert",
                                 "--disable-protocol", "rpcordma"], capture_output=True,
                                text=True, timeout=120)
        assert expert.returncode == 0 and expert.stdout.strip() == "", expert.stdout[:2000]
