"""RoCEv2 engine over a real veth pair between two network namespaces (root).

PREFIX rxv-a (10.250.0.1) runs the requester, PREFIX rxv-b (10.250.0.0) the responder,
each in its own forked process that setns()es into its namespace before
opening sockets. The namespaces are removed by the fixture finalizer even
when a test fails; the session's leftover check (conftest.py) sees them by the
suite's prefix. Goodput on one veth is `make bench`'s engine section, not a test here.
"""

from __future__ import annotations

import ctypes
import hashlib
import multiprocessing
import os
import random
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .conftest import PREFIX, wait_for_line

pytestmark = pytest.mark.integration

NS_A, NS_B = f"{PREFIX}rxv-a", f"{PREFIX}rxv-b"
IP_A, IP_B = "10.250.0.1", "10.250.0.0"
IFNAME = "rxv0"
QPN_A, QPN_B = 0x11, 0xABCD
PSN_A, PSN_B = 0xFFFF00, 0x123456  # A's PSNs wrap during the transfers
MIB = 1 << 20
CLONE_NEWNET = 0x40000000


@pytest.fixture(scope="module")
def veth() -> Iterator[None]:
    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    def ours() -> list[str]:
        return [ns for ns in (NS_A, NS_B) if os.path.exists(f"/run/netns/{ns}")]

    # `ip` in a child process, not pyroute2's netns.create: in one CI run that left
    # rxv-b missing and the test process itself in a fresh namespace (the session's
    # root-namespace check then saw only a down lo).
    try:
        for ns in ours():  # left by a run that was killed: ours by prefix
            ip("netns", "del", ns)
        for ns in (NS_A, NS_B):
            ip("netns", "add", ns)
        ip("-n", NS_A, "link", "add", IFNAME, "type", "veth", "peer", "name", IFNAME,
           "netns", NS_B)
        for ns, addr in ((NS_A, IP_A), (NS_B, IP_B)):
            ip("-n", ns, "link", "set", IFNAME, "mtu", "9000", "up")
            ip("-n", ns, "addr", "add", f"{addr}/31", "dev", IFNAME)
            ip("-n", ns, "link", "set", "lo", "up")
        yield
    finally:
        for ns in ours():
            ip("netns", "del", ns)


@pytest.fixture(params=["compiled", "python"], autouse=True)
def data_path(request, monkeypatch) -> str:
    """Every test runs on both data paths: the compiled `_wire` and the pure-Python
    reference (the forked sides inherit the environment)."""
    from emulator.roce import wire

    if request.param == "compiled" and wire.compiled() is None:
        pytest.skip("emulator.roce._wire is not built")
    monkeypatch.setenv(wire.PURE_ENV, "1" if request.param == "python" else "0")
    return request.param


@pytest.fixture(scope="module", autouse=True)
def no_leftover_namespaces() -> Iterator[None]:
    yield
    leftover = [ns for ns in (NS_A, NS_B) if os.path.exists(f"/run/netns/{ns}")]
    assert not leftover, f"namespaces left behind: {leftover}"


# -- the two sides, each run in a forked child inside its namespace ---------

@dataclass
class Plan:
    """What the requester does; the responder serves whatever comes."""

    mtu: int = 1024
    write_bytes: int = 0
    read_bytes: int = 0
    drop_every: int = 0  # both sides lose every Nth outgoing segment
    inject: bool = False  # send a corrupted-ICRC and an out-of-range datagram
    rto: float = 0.02
    seed: int = 7
    results: dict = field(default_factory=dict)


def _pattern(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


def _enter(ns: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {ns}")
    finally:
        os.close(fd)


def _side(plan: Plan, me: str, qpn: int, rqpn: int, sp: int, rp: int, drop: bool):
    from emulator.roce.endpoint import Endpoint
    from emulator.roce.memory import MemoryTable
    from emulator.roce.rc import QueuePair
    from emulator.roce.transport import Transport
    from emulator.roce.verbs import QpConfig

    cfg = QpConfig(qpn=qpn, remote_qpn=rqpn, send_psn=sp, recv_psn=rp, mtu=plan.mtu,
                   rto=plan.rto, retry_limit=12)
    memory = MemoryTable(key_seed=qpn & 0xFF)
    transport = Transport(me)
    # Seeded random loss at 1/drop_every: a strict "every Nth" pattern can fall
    # into step with go-back-N's resend rounds and drop the same PSN each round.
    rng = random.Random(plan.seed * 7919 + qpn)

    def lossy(_seg) -> bool:
        return rng.random() < 1 / plan.drop_every

    ep = Endpoint(transport, drop=lossy if drop and plan.drop_every else None)
    qp = QueuePair(cfg, memory)
    ep.add(qp, IP_B if me == IP_A else IP_A)
    return ep, qp, memory


def responder_main(plan: Plan, conn) -> None:
    _enter(NS_B)
    ep, qp, memory = _side(plan, IP_B, QPN_B, QPN_A, PSN_B, PSN_A, drop=True)
    sink = bytearray(max(plan.write_bytes, 4096))
    source = bytearray(_pattern(plan.seed + 1, max(plan.read_bytes, 4096)))
    mr_w, mr_r = memory.register(sink), memory.register(source)
    conn.send({"write": (mr_w.va, mr_w.rkey), "read": (mr_r.va, mr_r.rkey)})
    got: list = []

    def finished() -> bool:
        got.extend(qp.completions())
        return any(c.data == b"bye" for c in got) and qp.idle

    ep.run_until(finished, timeout=120, what="responder")
    for _ in range(50):  # let the last ACK leave
        ep.step()
    conn.send({"sha_write": hashlib.sha256(sink[:plan.write_bytes]).hexdigest(),
               "qp": qp.counters.as_dict(), "transport": ep.transport.counters.as_dict(),
               "injected_drops": ep.injected_drops})


def requester_main(plan: Plan, keys: dict, conn) -> None:
    _enter(NS_A)
    ep, qp, _ = _side(plan, IP_A, QPN_A, QPN_B, PSN_A, PSN_B, drop=True)
    out: dict = {}
    if plan.write_bytes:
        data = _pattern(plan.seed, plan.write_bytes)
        out["write_s"] = _timed(ep, qp, lambda: qp.post_write(1, data, *keys["write"]))
    if plan.read_bytes:
        dest = bytearray(plan.read_bytes)
        out["read_s"] = _timed(ep, qp, lambda: qp.post_read(2, dest, *keys["read"]))
        out["sha_read"] = hashlib.sha256(dest).hexdigest()
    if plan.inject:
        _inject(ep, qp, keys)
    qp.post_send(3, b"bye")
    out["bye"] = _wait_completions(ep, qp)
    out.update(qp=qp.counters.as_dict(), transport=ep.transport.counters.as_dict(),
               injected_drops=ep.injected_drops)
    conn.send(out)


def _wait_completions(ep, qp) -> list:
    done: list = []

    def finished() -> bool:
        done.extend(qp.completions())
        return qp.requester.idle

    ep.run_until(finished, timeout=120, what="requester")
    return [(c.kind.value, c.status.value, c.byte_len) for c in done]


def _timed(ep, qp, post: Callable[[], None]) -> float:
    start = time.perf_counter()
    post()
    done = _wait_completions(ep, qp)
    assert done and all(status == "success" for _, status, _ in done), done
    return time.perf_counter() - start


def _inject(ep, qp, keys: dict) -> None:
    """A WRITE ONLY at the expected PSN with a broken ICRC, then one whose
    RETH points past the region. Wait until the NAK for the second returns."""
    from emulator.roce.fastpath import FrameBuilder, Segment
    from emulator.roce.headers import Opcode

    va, rkey = keys["write"]
    builder = FrameBuilder(IP_A, IP_B, 0xC000)
    psn = qp.requester.nxt
    good = Segment(Opcode.WRITE_ONLY, QPN_B, psn, True, va, rkey, 8, payload=b"INJECTED")
    corrupt = bytearray(builder.build(good, ep.transport.next_ip_id()))
    corrupt[-1] ^= 0xFF
    ep.transport.send(bytes(corrupt), IP_B)
    outside = good._replace(va=va + (1 << 30))
    ep.transport.send(bytes(builder.build(outside, ep.transport.next_ip_id())), IP_B)
    ep.run_until(lambda: qp.counters.unexpected_acks > 0, timeout=10, what="access-error NAK")


def run_pair(plan: Plan) -> tuple[dict, dict]:
    """Run responder and requester processes for `plan`; return their reports."""
    ctx = multiprocessing.get_context("fork")
    (rb, rb_child), (ra, ra_child) = ctx.Pipe(), ctx.Pipe()
    resp = ctx.Process(target=_child, args=(responder_main, plan, rb_child), daemon=True)
    resp.start()
    try:
        keys = _recv(rb, 30)
        req = ctx.Process(target=_child, args=(requester_main, plan, keys, ra_child), daemon=True)
        req.start()
        try:
            a, b = _recv(ra, 180), _recv(rb, 60)
        finally:
            req.join(5)
            if req.is_alive():
                req.kill()
    finally:
        resp.join(5)
        if resp.is_alive():
            resp.kill()
    return a, b


def _child(main, *args) -> None:
    """Run a side; a failure reaches the parent as a report, not as a silent exit."""
    conn = args[-1]
    try:
        main(*args)
    except Exception as e:  # noqa: BLE001 -- handed to the parent, which fails the test
        conn.send({"error": f"{type(e).__name__}: {e}"})


def _recv(conn, timeout: float):
    if not conn.poll(timeout):
        raise AssertionError(f"no report from child process within {timeout} s")
    msg = conn.recv()
    if isinstance(msg, dict) and "error" in msg:
        raise AssertionError(f"child process failed: {msg['error']}")
    return msg


# -- tests ------------------------------------------------------------------

def test_8mib_write_and_read_with_integrity(veth: None) -> None:
    plan = Plan(write_bytes=8 * MIB, read_bytes=8 * MIB, inject=True)
    a, b = run_pair(plan)
    # Both injected datagrams aimed "INJECTED" at the start of the sink, so the
    # hash also proves neither was placed.
    assert b["sha_write"] == hashlib.sha256(_pattern(plan.seed, plan.write_bytes)).hexdigest()
    assert a["sha_read"] == hashlib.sha256(_pattern(plan.seed + 1, plan.read_bytes)).hexdigest()
    # the corrupted datagram: counted by the transport and its QP, dropped
    assert b["transport"]["bad_icrc"] == 1 and b["qp"]["bad_icrc"] == 1
    # the out-of-range RETH: refused, counted, NAKed (the requester ignores a
    # NAK for a PSN it never sent)
    assert b["qp"]["access_errors"] == 1 and a["qp"]["unexpected_acks"] == 1
    assert a["bye"] == [("send", "success", 3)]


def test_two_percent_random_loss_still_completes(veth: None) -> None:
    plan = Plan(write_bytes=4 * MIB, read_bytes=4 * MIB, drop_every=50, seed=11)
    a, b = run_pair(plan)
    assert b["sha_write"] == hashlib.sha256(_pattern(plan.seed, plan.write_bytes)).hexdigest()
    assert a["sha_read"] == hashlib.sha256(_pattern(plan.seed + 1, plan.read_bytes)).hexdigest()
    assert a["injected_drops"] > 0 and b["injected_drops"] > 0
    assert a["qp"]["retransmitted_packets"] > 0
    assert b["qp"]["naks_tx"] > 0 and a["qp"]["implied_naks"] > 0


def test_tshark_decodes_engine_packets(veth: None, tmp_path: Path) -> None:
    pcap = tmp_path / "roce.pcap"
    dump = subprocess.Popen(
        ["ip", "netns", "exec", NS_B, "tcpdump", "-i", IFNAME, "-n", "--immediate-mode",
         "-U", "-Z", "root", "-w", str(pcap), "udp", "port", "4791"],
        stderr=subprocess.PIPE, text=True)
    try:
        wait_for_line(dump, "listening on", 10)
        run_pair(Plan(write_bytes=20_000, read_bytes=20_000, inject=True))
    finally:
        dump.terminate()
        dump.wait(10)
    fields = ["frame.number", "_ws.col.Protocol", "infiniband.bth.opcode", "_ws.malformed"]
    rows = [r.split("\t") for r in _tshark(pcap, "-T", "fields",
                                             *[a for f in fields for a in ("-e", f)])]
    opcodes = {int(r[2]) for r in rows if r[2]}
    assert len(rows) > 40 and all(r[1] == "RRoCE" for r in rows), rows[:5]
    assert {6, 7, 8, 10, 12, 13, 14, 15, 17, 4} <= opcodes, opcodes
    assert not any(r[3] for r in rows), "tshark reported malformed packets"
    assert _tshark(pcap, "-Y", "_ws.expert") == []


def _tshark(pcap: Path, *args: str) -> list[str]:
    """tshark output lines. UDP 4791 decodes as RoCEv2 ("RRoCE") by default;
    the RPC-over-RDMA heuristic is disabled because it claims any short SEND
    payload (our 3-byte "bye") and then calls it malformed."""
    argv = ["tshark", "-r", str(pcap), "--disable-protocol", "rpcordma", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.splitlines()




@pytest.mark.parametrize("mtu", [1024, 4096])
def test_32mib_each_way_at_both_mtus_with_integrity(veth: None, mtu: int) -> None:
    """Both directions at each MTU, every byte checked: the WRITE's digest at the responder,
    the READ's at the requester. (How fast: `make bench`, section engine.)"""
    plan = Plan(mtu=mtu, write_bytes=32 * MIB, read_bytes=32 * MIB, seed=mtu)
    a, b = run_pair(plan)
    assert b["sha_write"] == hashlib.sha256(_pattern(plan.seed, plan.write_bytes)).hexdigest()
    assert a["sha_read"] == hashlib.sha256(_pattern(plan.seed + 1, plan.read_bytes)).hexdigest()
    assert a["bye"] == [("send", "success", 3)]
    assert b["qp"]["rx_packets"] >= plan.write_bytes // mtu  # segmented at this MTU
