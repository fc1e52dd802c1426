"""The MRC receiver's compiled path (`_wire.mrc_place`, _wire_mrcrx.h) against its
pure-Python reference: the same packets, in the same order, into two receivers over two
identical regions must give the same answers, counters, cumulative point, immediates
and placed bytes -- with reordering, duplicates, trims, probes, bad R_Keys and VAs,
ECN marks, completion with immediate, and the 24-bit PSN wrapping."""

from __future__ import annotations

import random

import pytest

from emulator.roce.memory import Access, MemoryTable
from emulator.roce.mrc_receiver import MrcReceiver
from emulator.roce.mrc_wire import MrcPacket

MTU = 64
PEER = 0x0A000002
WRAP = (1 << 24) - 40
RO = 0x101  # MemoryTable's second R_Key from its first


@pytest.fixture
def w():
    from emulator.roce import wire

    w = wire.compiled()
    if w is None or not hasattr(w, "mrc_place"):
        pytest.skip("emulator.roce._wire is not built")
    return w


def _pair(w, size: int, cack: int = 0) -> tuple[MrcReceiver, MrcReceiver, list, int]:
    """A pure and a compiled receiver, each with a writable region and a read-only one
    (R_Key: the writable one's + RO)."""
    rxs, bufs = [], []
    for pure in (True, False):
        mem = MemoryTable()
        buf = bytearray(size)
        mr = mem.register(buf)
        ro = mem.register(bytearray(size), Access.REMOTE_READ)  # no WRITE may touch it
        assert ro.rkey == mr.rkey + RO
        rx = MrcReceiver(0x22, 0x11, mem, ack_every=8, pure=pure)
        if pure:
            rx._cack = cack
        else:
            rx._sv[0] = cack
        rxs.append(rx)
        bufs.append(buf)
    assert rxs[1]._w is w and rxs[0]._w is None
    return rxs[0], rxs[1], bufs, mr.rkey


def _messages(rng: random.Random, va: int, rkey: int, first_psn: int, count: int
              ) -> list[MrcPacket]:
    """`count` messages of 1-6 packets; every third ends with a WRITE_IMM."""
    out, psn, off = [], first_psn, 0
    for msg in range(count):
        k = rng.randint(1, 6)
        for j in range(k):
            imm = msg % 3 == 0 and j == k - 1
            out.append(MrcPacket(0xE1 if imm else 0xE0, 0x22, psn % (1 << 24),
                                 4 if rng.random() < 0.1 else 0, 0, rng.randrange(1 << 16), msg,
                                 rng.randrange(1 << 32), k * MTU, va + off, rkey, MTU,
                                 0xBEEF0000 + msg if imm else 0, rng.randbytes(MTU),
                                 ecn=3 if rng.random() < 0.2 else 2, src_ip=PEER))
            psn, off = psn + 1, off + MTU
    return out


def _mangle(rng: random.Random, packets: list[MrcPacket], rkey: int) -> list[MrcPacket]:
    """Reorder, duplicate, trim, probe, and corrupt some R_Keys and VAs."""
    out: list[MrcPacket] = []
    for p in packets:
        r = rng.random()
        if r < 0.05:
            out.append(p._replace(flags=p.flags | 1, payload=b""))  # trimmed: resent later
        elif r < 0.08:
            out.append(p._replace(rkey=rkey ^ 0x100))  # an R_Key nobody registered
        elif r < 0.10:
            out.append(p._replace(rkey=rkey + RO))  # the read-only region
        elif r < 0.12:
            out.append(p._replace(va=p.va + (1 << 40)))  # outside the region
        elif r < 0.14:
            out.append(p._replace(length=MTU + 1))
        if r < 0.14:
            packets.append(p)  # the good copy, later
            continue
        out.append(p)
        if r < 0.2:
            out.append(p)  # duplicate
        if r < 0.22:
            out.append(MrcPacket(0xE4, 0x22, 7, ev=3, ts=9, src_ip=PEER))  # probe
    for _ in range(len(out) // 3):  # local reordering
        i = rng.randrange(len(out) - 1)
        j = min(len(out) - 1, i + rng.randint(1, 80))
        out[i], out[j] = out[j], out[i]
    return out


def _state(rx: MrcReceiver, buf: bytearray) -> tuple:
    return (rx.cack, rx.counters, rx.immediates, bytes(buf), rx._placed, rx._last)


def _compare(w, seed: int, cack: int = 0, messages: int = 120) -> None:
    rng = random.Random(seed)
    py, c, (buf_py, buf_c), rkey = _pair(w, 800 * MTU, cack)
    assert py.memory.region(rkey) is not None and c.memory.region(rkey) is not None
    mr = py.memory.region(rkey)
    packets = _mangle(rng, _messages(rng, mr.va, rkey, cack, messages), rkey)
    i, now = 0, 1.0
    while i < len(packets):
        burst = packets[i:i + rng.randint(1, 64)]
        want = [a for p in burst for a in py.receive(p, now)]
        k, got = c.receive_burst(burst, 0, {PEER}, now)
        assert k == len(burst) and got == want
        assert _state(c, buf_c) == _state(py, buf_py)
        assert c.flush(now) == py.flush(now)
        i, now = i + len(burst), now + 0.001
    assert py.counters.messages_done == messages and buf_py == buf_c
    assert py.counters.duplicates and py.counters.access_errors and py.counters.trim_nacks_sent


@pytest.mark.parametrize("seed", range(6))
def test_compiled_receiver_matches_the_python_reference(w, seed):
    _compare(w, seed)


@pytest.mark.parametrize("seed", range(3))
def test_compiled_receiver_matches_across_the_24_bit_psn_wrap(w, seed):
    _compare(w, 100 + seed, cack=WRAP)


@pytest.mark.parametrize("pure", [True, False])
def test_a_burst_stops_at_another_connection_or_a_stranger(w, pure):
    c = _pair(w, 64 * MTU)[pure is False]
    rkey = _pair(w, 64 * MTU)[3]
    mr = c.memory.region(rkey)
    ps = _messages(random.Random(1), mr.va, rkey, 0, 6)[:6]
    assert len(ps) == 6
    ps[2] = ps[2]._replace(conn=0x99)
    ps[4] = ps[4]._replace(src_ip=PEER + 1)
    assert c.receive_burst(ps, 0, {PEER}, 0.0)[0] == 2
    assert c.receive_burst(ps, 2, {PEER}, 0.0)[0] == 2  # not its connection: not taken
    assert c.receive_burst(ps, 3, {PEER}, 0.0)[0] == 4
    assert c.receive_burst(ps, 4, {PEER}, 0.0)[0] == 4  # not its peer
    assert c.receive_burst(ps, 4, None, 0.0)[0] == 6  # (None: any sender)
    assert c.cack == 2 and c.counters.packets == 5


def test_the_bitmap_acknowledges_what_arrived_behind_a_hole(w):
    py, c, _, rkey = _pair(w, 256 * MTU)
    mr = c.memory.region(rkey)
    ps = _messages(random.Random(2), mr.va, rkey, 0, 40)[:100]
    order = ps[1:70] + ps[:1]
    want = [a for p in order for a in py.receive(p, 0.0)]
    assert c.receive_burst(order, 0, None, 0.0)[1] == want
    bitmaps = [s.bitmap for s in want]
    assert any(bitmaps) and c.cack == py.cack == 70


def test_mrc_place_refuses_what_is_not_a_burst(w):
    state = w.mrc_rx_state()
    with pytest.raises(TypeError):
        w.mrc_place(state, [("not", "a packet")], 0, 0x22, None, 1, None, 0, 8)
    with pytest.raises(ValueError):
        w.mrc_place(bytearray(8), [], 0, 0x22, None, 1, None, 0, 8)
    with pytest.raises(TypeError):
        w.mrc_rx_sack(bytearray(8))


def test_the_endpoint_hands_a_list_burst_in_runs_and_a_pure_stream_one_by_one(w):
    """The endpoint's demux (its socket left out): a compiled burst (a list) reaches the
    compiled receiver in runs, the pure path's stream (an iterator) the pure receiver one
    packet at a time; both answer alike, and strangers are counted either way."""
    from emulator.roce.mrc_endpoint import MrcCounters, MrcEndpoint, _Conn

    py, c, (buf_py, buf_c), rkey = _pair(w, 800 * MTU)
    rng = random.Random(9)
    mr = py.memory.region(rkey)
    packets = _mangle(rng, _messages(rng, mr.va, rkey, 0, 60), rkey)
    packets.insert(5, packets[5]._replace(conn=0x77))  # no such connection
    packets.insert(9, packets[9]._replace(src_ip=PEER + 1))  # not its peer
    answers = []
    for rx, feed in ((py, iter), (c, list)):
        ep = object.__new__(MrcEndpoint)
        ep.counters = MrcCounters()
        ep.conns = {0x22: _Conn(rx, [], [], {PEER}, [])}
        got = [a for k in range(0, len(packets), 64)
               for a in ep._answer(feed(packets[k:k + 64]), 1.0).get(0x22, [])]
        answers.append((got, ep.counters.unknown_conn))
    assert answers[0] == answers[1] and answers[0][1] == 2
    assert _state(c, buf_c) == _state(py, buf_py)
