"""The compiled MRC batch path (_wire_mrcio.h) against its Python references: MrcRuns and
MrcPackets built into a Sender's slots (mrc_add) byte for byte as mrc_wire.build makes
the packets MrcRun.packets_() stands for; a Receiver's recvmmsg ring parsed (mrc_recv) as
mrc_wire.parse does; and a sender's bursts (poll_burst) the same packets as poll."""

from __future__ import annotations

import random
import socket

import pytest
from test_mrc import _packets

from emulator.roce.errors import MalformedPacket
from emulator.roce.memory import MemoryTable
from emulator.roce.mrc_ev import EvSet, entropy_values
from emulator.roce.mrc_receiver import MrcReceiver
from emulator.roce.mrc_sender import MrcSender, SenderConfig
from emulator.roce.mrc_wire import MrcPacket, MrcRun, build, expand, parse
from emulator.roce.nscc import Nscc, NsccParams

A, B = socket.inet_aton("10.0.0.1"), socket.inet_aton("10.0.0.2")
A1, B1 = socket.inet_aton("10.1.0.1"), socket.inet_aton("10.1.0.2")
DATA_TOS, CTRL_TOS = 18 << 2 | 2, 48 << 2
MTU = 1024


@pytest.fixture
def w():
    from emulator.roce import wire
    from emulator.roce.mrc_endpoint import compiled_mrc

    if wire.compiled() is None or compiled_mrc() is None:
        pytest.skip("emulator.roce._wire is not built")
    return wire.compiled()


def _run(psn: int = 0xFFFFFE, packets: int = 5, planes: int = 2) -> MrcRun:
    payload = memoryview(bytes(random.Random(psn).randbytes(packets * MTU)))
    evs = [(i % planes) << 16 | (0xC000 + 7 * i) for i in range(packets)]
    return MrcRun(0xABCDE, psn, packets, 3, 0xFFFFFFF0, 99 * MTU, 0x7F0000001000, 0xBEEF, MTU,
                  4, evs, payload)


def _reference(items: list, ip_id: int) -> list[bytes]:
    out = []
    for p in expand(items):
        ip_id = (ip_id + 1) & 0xFFFF or 1
        src, dst = (A, B) if p.plane % 2 == 0 else (A1, B1)
        out.append(bytes(build(p, src, dst, DATA_TOS if p.opcode <= 0xE1 else CTRL_TOS, ip_id)))
    return out


def _flows(w):
    return (w.Flow(A, B, 0), w.Flow(A1, B1, 0))


def test_run_stands_for_its_packets():
    run = _run(packets=3)
    ps = run.packets_()
    assert [p.psn for p in ps] == [0xFFFFFE, 0xFFFFFF, 0]  # 24 bits on the wire
    assert [p.flags for p in ps] == [0, 0, 4]  # ACK_REQ where the full PSN divides by `every`
    assert [p.plane for p in ps] == [0, 1, 0] and ps[1].ev == 0xC007
    assert [p.va for p in ps] == [0x7F0000001000 + i * MTU for i in range(3)]
    assert bytes(ps[2].payload) == bytes(run.payload[2 * MTU:])


def test_mrc_add_builds_runs_and_packets_as_the_python_reference(w):
    items = [_run(), *[p._replace(plane=p.plane % 2) for p in _packets()], _run(7, 3, 1)]
    tx = w.Sender(64, 4608)
    i, sub, ip_id = w.mrc_add(tx, _flows(w), items, 0, 0, DATA_TOS, CTRL_TOS, 0xFFFE)
    want = _reference(items, 0xFFFE)
    assert (i, sub, tx.count) == (len(items), 0, len(want))
    assert [tx.datagram(k) for k in range(tx.count)] == want
    assert ip_id == 0xFFFE + len(want) - 0xFFFF  # wraps past 0 (0 is skipped)
    w.mrc_drop(tx)
    assert tx.count == 0


def test_mrc_add_stops_when_full_and_resumes_inside_a_run(w):
    items = [_run(packets=7), _packets()[3]]
    tx, got, i, sub, ip_id = w.Sender(3, 4608), [], 0, 0, 1
    while i < len(items):
        i, sub, ip_id = w.mrc_add(tx, _flows(w), items, i, sub, DATA_TOS, CTRL_TOS, ip_id)
        got += [tx.datagram(k) for k in range(tx.count)]
        w.mrc_drop(tx)
    assert got == _reference(items, 1)


def test_mrc_add_refuses_bad_runs(w):
    run = _run(packets=3)
    with pytest.raises(ValueError):
        w.mrc_add(w.Sender(8, 4608), _flows(w), [run._replace(evs=run.evs[:2])], 0, 0, 0, 0, 1)
    with pytest.raises(ValueError):
        w.mrc_add(w.Sender(8, 4608), _flows(w), [run._replace(mtu=MTU + 1)], 0, 0, 0, 0, 1)
    with pytest.raises(TypeError):
        w.mrc_add(w.Sender(8, 4608), (A,), [run], 0, 0, 0, 0, 1)


def test_mrc_recv_parses_a_burst_as_parse_does(w):
    datagrams = _reference([_run(packets=3), *[p._replace(plane=0) for p in _packets()]], 5)
    bad = bytearray(datagrams[0])
    bad[100] ^= 1  # a payload byte: bad ICRC
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with a, b:
        for d in [*datagrams, bytes(bad), b"short"]:
            a.send(d)
        rx = w.Receiver(64, 4608)
        packets, got, malformed = w.mrc_recv(rx, b, 64)
        assert (got, malformed) == (len(datagrams) + 2, 2)
        want = [parse(bytearray(d)) for d in datagrams]
        assert [p._replace(payload=bytes(p.payload)) for p in packets] == [
            q._replace(payload=bytes(q.payload)) for q in want]
        assert all(type(p) is MrcPacket for p in packets)
        assert w.mrc_recv(rx, b, 64) == ([], 0, 0)
    with pytest.raises(MalformedPacket):
        parse(bad)


def _sender(seed: int) -> MrcSender:
    cc = Nscc(NsccParams(MTU, base_rtt_s=1e-3, target_s=0.5e-3, max_cwnd=256 * MTU,
                         init_cwnd=37 * MTU), 0.0)
    tx = MrcSender(0x11, 0x22, EvSet(entropy_values(seed, 8), 2, 0.01), cc,
                   SenderConfig(mtu=MTU, ack_timeout_s=0.05))
    src = memoryview(bytes(random.Random(seed).randbytes(200 * MTU + 77)))
    for k, off in enumerate(range(0, len(src), 9 * MTU)):
        tx.post_write(k, src[off:off + 9 * MTU], 0x1000 + off, 5, imm=k if k % 2 else None)
    return tx


def test_poll_burst_is_poll_in_runs():
    """Two identical senders: one polled in bursts, one packet by packet, through a SACK
    and a loss; the same packets, the same state."""
    a, b = _sender(4), _sender(4)
    runs = 0
    for k, (now, budget) in enumerate(((0.0, 20), (0.001, 64), (0.002, 7), (0.003, 64),
                                       (0.2, 64))):
        burst = a.poll_burst(now, budget)
        runs += sum(type(r) is MrcRun for r in burst)
        assert expand(burst) == b.poll(now, budget)
        cack = 5 + 9 * k  # acknowledges part of what went, with holes
        sack = MrcPacket(0xE2, 0x11, cack, ev=b._unacked[cack + 2].path.ev, bitmap=0b100001010,
                         ref=cack + 2)
        a.receive(sack, now + 0.0005)
        b.receive(sack, now + 0.0005)
        assert a.counters == b.counters and a._next_psn == b._next_psn
        assert a._inflight == b._inflight and sorted(a._unacked) == sorted(b._unacked)
    assert runs >= 2 and a.counters.losses == b.counters.losses > 0


def test_the_cumulative_advance_counts_every_acknowledgement_in_the_ev_set():
    """A SACK's cumulative range (acknowledged inline, `_ack_range`) tells the EV set of
    each acknowledgement as a bitmap bit does: "acknowledged lately" and the plane rules
    of mrc_ev read those counts."""
    tx = _sender(7)
    sent = expand(tx.poll_burst(0.0, 30))
    tx.receive(MrcPacket(0xE2, 0x11, 19, ev=sent[21].ev, bitmap=0b100, ref=21), 0.001)
    # PSNs 0..18 by the cumulative range, 21 by ref, 22 by the bitmap (bit k: 20 + k)
    assert tx.evs.acks == 21 == sum(tx.evs.plane_acks)
    acked = {(p.plane, p.ev) for p in sent[:19]} | {(sent[21].plane, sent[21].ev)}
    assert {(p.plane, p.ev) for p in tx.evs.paths if p.acked_at > 0} == acked | {
        (sent[22].plane, sent[22].ev)}


def test_endpoint_free_receiver_places_what_runs_carry(w):
    mem = MemoryTable()
    dst = bytearray(8 * MTU)
    mr = mem.register(dst)
    rx = MrcReceiver(0x22, 0x11, mem)
    run = _run(psn=0, packets=8, planes=1)._replace(va=mr.va, rkey=mr.rkey, length=8 * MTU)
    tx = w.Sender(64, 4608)
    w.mrc_add(tx, _flows(w), [run], 0, 0, DATA_TOS, CTRL_TOS, 1)
    for k in range(tx.count):
        rx.receive(parse(bytearray(tx.datagram(k))), 0.0)
    assert dst == bytes(run.payload) and rx.counters.messages_done == 1


def test_a_receivers_pending_sack_goes_out_when_its_stream_pauses():
    """The endpoint's receive turn (its socket faked): data without ACK_REQ is not SACKed
    at the end of each small burst, but the turn that brings the connection nothing
    flushes one SACK for all of it."""
    from emulator.roce.mrc_endpoint import MrcCounters, MrcEndpoint, _Conn

    mem = MemoryTable()
    mr = mem.register(bytearray(8 * MTU))
    rx = MrcReceiver(0x22, 0x11, mem)
    ep = object.__new__(MrcEndpoint)
    ep.counters, ep._unflushed = MrcCounters(), set()
    ep.conns = {0x22: _Conn(rx, [A], [B], {int.from_bytes(B, "big")}, [0])}
    bursts: list[list[MrcPacket]] = []
    sent: list[MrcPacket] = []
    ep._read = lambda: bursts.pop(0)  # type: ignore[method-assign]
    ep._send = lambda c, items: sent.extend(items) or len(items)  # type: ignore[method-assign]
    data = [MrcPacket(0xE0, 0x22, i, 0, 0, 0xC000 + i, 0, 0, 8 * MTU, va=mr.va + i * MTU,
                      rkey=mr.rkey, length=MTU, payload=bytes(MTU),
                      src_ip=int.from_bytes(B, "big")) for i in range(3)]
    for burst in ([data[0]], data[1:], []):
        bursts.append(burst)
        ep._receive(0.0)
        if burst:
            assert sent == []  # mid-stream: no SACK per burst
    [sack] = sent
    assert sack.opcode == 0xE2 and sack.psn == 3 and sack.packets == 3
    bursts.append([])
    ep._receive(0.0)
    assert len(sent) == 1 and not ep._unflushed  # flushed once


def test_an_unshaped_lab_sacks_every_32_packets_a_shaped_one_every_16():
    from emulator.engine import mrc
    from emulator.engine.config import EngineConfig
    from emulator.engine.job import Job, Op

    job = Job(Op.WRITE, size=1 << 20, transport="mrc")
    fast, shaped = EngineConfig(), EngineConfig(line_rate_bps=100e6, dilation=4000.0)
    assert mrc.sender(job, 1, 2, 1, fast).config.ack_every == 32 == mrc.ack_every(fast)
    assert mrc.sender(job, 1, 2, 1, shaped).config.ack_every == 16 == mrc.ack_every(shaped)
