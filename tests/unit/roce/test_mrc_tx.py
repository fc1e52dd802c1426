"""The compiled MRC sender records (_wire_mrctx.h) against the Python reference: two
senders, one `pure`, driven through the same seeded fabric (spraying that reorders
across EVs, random drops, a dead EV, trims, duplicates, two planes) must send the same
packets, in the same order, and end with the same completions, counters and EV states."""

from __future__ import annotations

import random
import socket
from collections import deque
from dataclasses import fields

import pytest

from emulator.roce.memory import MemoryTable
from emulator.roce.mrc_ev import EvSet, EvState, entropy_values
from emulator.roce.mrc_receiver import MrcReceiver
from emulator.roce.mrc_sender import MrcSender, SenderConfig
from emulator.roce.mrc_state import SentMessage, SentPacket
from emulator.roce.mrc_wire import MrcFlag, MrcOpcode, MrcPacket, build, expand, parse
from emulator.roce.nscc import Nscc, NsccParams

MTU = 1024
A, B = socket.inet_aton("10.0.0.1"), socket.inet_aton("10.0.0.2")


def _trimmed(p: MrcPacket) -> MrcPacket:
    """`p` as a switch trims it: headers only, the TRIMMED flag set (as test_mrc does)."""
    d = bytearray(build(p, A, B, 18 << 2 | 2, 1)[:114])
    d[40] |= MrcFlag.TRIMMED
    d[2:4] = (114).to_bytes(2, "big")
    d[24:26] = (94).to_bytes(2, "big")
    return parse(d)


@pytest.fixture
def w():
    from emulator.roce import mrc_sender

    w = mrc_sender._compiled()
    if w is None:
        pytest.skip("emulator.roce._wire is not built")
    return w


def _sender(pure: bool, planes: int, reorder: int) -> MrcSender:
    cc = Nscc(NsccParams(MTU, base_rtt_s=1e-3, target_s=0.5e-3, max_cwnd=256 * MTU,
                         init_cwnd=96 * MTU), 0.0)
    evs = EvSet(entropy_values(7, 8, planes), 2, probe_interval_s=0.002)
    return MrcSender(0x11, 0x22, evs, cc, SenderConfig(mtu=MTU, ack_timeout_s=0.004, reorder=reorder,
                                                       ack_every=8), pure=pure)


def _fabric(rng: random.Random, p: MrcPacket, step: int, dead: int) -> list[MrcPacket]:
    """What the fabric delivers of `p` at `step`: lossy for the first 40 steps (drops,
    trims), the `dead` EV's path silent for 25, a duplicate now and then; ECN marks
    throughout (the SACKs that echo them set EVs aside: mrc_lb)."""
    lossy = step < 40
    if p.opcode in (MrcOpcode.WRITE, MrcOpcode.WRITE_IMM, MrcOpcode.PROBE) and (
            (p.ev == dead and step < 25) or (lossy and rng.random() < 0.04)):
        return []
    if p.is_data and p.length > 100 and lossy and rng.random() < 0.02:  # trimmed
        p = _trimmed(p)
    if p.is_data and rng.random() < 0.08:
        p = p._replace(ecn=3)
    return [p, p] if rng.random() < 0.02 else [p]


def _drive(pure: bool, seed: int, planes: int = 2, reorder: int = 0) -> dict:
    """One transfer through a seeded lossy fabric: what the sender sent and how it ended."""
    rng = random.Random(seed)
    mem = MemoryTable()
    size = 300 * MTU + 77
    dst = bytearray(size)
    mr = mem.register(dst)
    src = bytes(random.Random(seed + 1).randbytes(size))
    tx, rx = _sender(pure, planes, reorder), MrcReceiver(0x22, 0x11, mem, ack_every=8, pure=True)
    for i, off in enumerate(range(0, size, 20 * MTU + 5)):  # odd sizes: short last packets
        tx.post_write(i, memoryview(src)[off:off + 20 * MTU + 5], mr.va + off, mr.rkey,
                      imm=i if i % 3 == 0 else None)
    dead = entropy_values(7, 8, planes)[3][1]  # one EV's path drops everything for a while
    hold: list[MrcPacket] = []
    sent, done = [], []
    now = 0.0
    for step in range(20000):
        now += 1e-4
        for p in expand(tx.poll_burst(now, 48)):
            sent.append((p.opcode, p.psn, p.plane, p.ev, p.flags, p.msg, p.length,
                         bytes(p.payload)))
            hold += _fabric(rng, p, step, dead)
        by_ev: dict[tuple[int, int], list[MrcPacket]] = {}
        for p in hold:  # each EV keeps its order; EVs overtake each other
            by_ev.setdefault((p.plane, p.ev), []).append(p)
        hold, out = [], []
        for queue in by_ev.values():
            n = len(queue) if rng.random() < 0.4 else rng.randrange(len(queue) + 1)
            out += queue[:n]
            hold += queue[n:]
        rng.shuffle(out)
        replies = [r for p in out for r in rx.receive(p, now)]
        for r in replies + rx.flush(now):
            if not (step < 40 and rng.random() < 0.03):  # SACKs get lost too
                tx.receive(r, now)
        done += tx.completions()
        sent.append((tx.evs.by_state(), tx.evs.acks, tx._inflight, len(tx._unacked)))  # each step
        if tx.idle and not hold:
            break
    stats = tx.stats()
    return {"sent": sent, "done": done, "error": tx.error, "stats": stats, "steps": step,
            "data": bytes(dst) == src, "acks": tx.evs.acks, "plane_acks": tx.evs.plane_acks,
            "lb": (tx.evs.lb.picks, tx.evs.lb.recycled, tx.evs.lb.set_aside),
            "states": [(p.state, p.seq_sent, p.seq_acked, p.acked_at) for p in tx.evs.paths]}


@pytest.mark.parametrize("seed,planes,reorder", [(1, 1, 0), (5, 2, 0), (3, 2, 2), (4, 1, 1)])
def test_the_compiled_records_send_what_the_reference_sends(w, seed, planes, reorder):
    ref, fast = _drive(True, seed, planes, reorder), _drive(False, seed, planes, reorder)
    assert ref["data"] and not ref["error"], "the reference itself did not finish"
    assert ref["stats"]["losses"] > 0 and ref["stats"]["retransmitted_packets"] > 0  # exercised
    assert ref["stats"]["trim_nacks_received"] > 0 and ref["stats"]["timeouts"] > 0
    assert ref["stats"]["probes_answered"] > 0
    assert ref["lb"][1] > 0 and ref["lb"][2] > 0  # EVs recycled and set aside
    for key in ref:
        assert fast[key] == ref[key], key


def test_the_compiled_sender_keeps_c_records_and_the_pure_one_python_ones(w):
    for pure, kind in ((False, w.SentPacket), (True, SentPacket)):
        tx = _sender(pure, 1, 0)
        tx.post_write(0, memoryview(bytes(5 * MTU)), 0x1000, 7)
        tx.poll_burst(0.0, 8)
        assert tx._unacked and all(type(st) is kind for st in tx._unacked.values())
        assert [st.seq for st in tx._unacked.values()] == [0] * 5  # five EVs, one each


def test_a_c_record_has_the_reference_records_fields(w):
    msg = SentMessage(0, 9, memoryview(b"x"), 0, 1, None, 1)
    args = (5, msg, 2, 100, "path", 1.5, 3)
    ref, c = SentPacket(*args), w.SentPacket(*args)
    for f in fields(SentPacket):
        assert getattr(c, f.name) == getattr(ref, f.name), f.name
    c.lost, c.resent, c.retries, c.sent = True, True, 4, 2.5
    assert (c.lost, c.resent, c.retries, c.sent) == (True, True, 4, 2.5)
    with pytest.raises(TypeError):
        w.SentPacket(5, msg)  # the fields a record needs


def test_the_compiled_calls_refuse_what_is_not_theirs(w):
    with pytest.raises(TypeError):
        w.mrc_track({}, 0, object(), 0, MTU, [], 0.0)  # not a SentMessage
    msg = SentMessage(0, 9, memoryview(b"x"), 0, 1, None, 1)
    with pytest.raises(TypeError):
        w.mrc_track({}, 0, msg, 0, MTU, [object()], 0.0)  # not a Path
    with pytest.raises(TypeError):
        w.mrc_ack_range({0: "not a record"}, 0, 1, {}, [], [], [0], 0)
    tx = _sender(False, 1, 0)
    tx.post_write(0, memoryview(bytes(2 * MTU)), 0x1000, 7)
    tx.poll_burst(0.0, 8)
    del tx.evs.paths[0].queue  # an unset slot: an error, not a crash
    with pytest.raises(AttributeError):
        w.mrc_track({}, 0, msg, 0, MTU, [tx.evs.paths[0]], 0.0)
    tx._unacked[0].msg = "not a message"
    with pytest.raises(TypeError, match="SentMessage"):
        w.mrc_ack_range(tx._unacked, 0, 1, {}, [], tx.evs.lb.fresh, tx.evs.plane_acks, 0)
    with pytest.raises(TypeError):  # the EV queues are deques: the call is deque's own method
        tx.evs.paths[1].queue = [object()]
        w.mrc_scan({tx.evs.paths[1]: None}, 0)
    with pytest.raises(ValueError):
        w.mrc_take(deque(), (), [], 0, 0, 1)  # no active EV to take
    with pytest.raises(TypeError):
        w.mrc_take(deque([object()]), (), tx.evs.paths, 0, 0, 1)  # a recycled non-Path
    with pytest.raises(TypeError):
        w.mrc_take(deque(), (), [object()], 0, 0, 1)  # an active non-Path


def test_the_compiled_take_picks_the_evs_the_reference_picks(w):
    """EvSet.take in C (mrc_take) against the Python loop, from random states: recycled
    EVs of every state, set-aside clocks around the current pick, a short active list."""
    rng = random.Random(9)
    for trial in range(300):
        sets = []
        for _ in range(2):  # two identical EV sets: one taken from in Python, one in C
            rng_i = random.Random(trial)
            evs = EvSet(entropy_values(trial, 8), 1, probe_interval_s=1.0)
            evs.lb.picks = rng_i.randrange(100)
            for p in evs.paths:
                p.state = rng_i.choice(list(EvState))
                p.aside_until = evs.lb.picks + rng_i.randrange(-3, 12)
            evs._active = [p for p in evs.paths if rng_i.random() < 0.8] or evs.paths[:1]
            evs._cursor = rng_i.randrange(len(evs._active))
            evs.lb.fresh.extend(rng_i.choice(evs.paths) for _ in range(rng_i.randrange(12)))
            sets.append(evs)
        n = rng.randrange(1, 20)
        ref, fast = sets[0].take(n), sets[1].take(n, w)
        assert [p.ev for p in fast] == [p.ev for p in ref], trial
        assert (sets[1]._cursor, sets[1].lb.picks, sets[1].lb.recycled, list(sets[1].lb.fresh)) == \
            (sets[0]._cursor, sets[0].lb.picks, sets[0].lb.recycled,
             [sets[1].paths[sets[0].paths.index(p)] for p in sets[0].lb.fresh]), trial
