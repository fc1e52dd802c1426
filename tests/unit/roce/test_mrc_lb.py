"""New packets' EVs (emulator/roce/mrc_lb.py, REPS): an acknowledged EV is recycled, so
each EV is sent on at the rate its path returns its packets; an EV whose packet came
back marked or queued is set aside for a round and then comes back."""

from __future__ import annotations

import random
import socket
from collections import Counter

from emulator.roce.memory import MemoryTable
from emulator.roce.mrc_ev import EvSet, EvState, entropy_values
from emulator.roce.mrc_receiver import MrcReceiver
from emulator.roce.mrc_sender import MrcSender, SenderConfig
from emulator.roce.mrc_wire import build, parse
from emulator.roce.nscc import Nscc, NsccParams

MTU = 1024
A, B = socket.inet_aton("10.0.0.1"), socket.inet_aton("10.0.0.2")


def _evs(count: int = 8, seed: int = 5) -> EvSet:
    return EvSet(entropy_values(seed, count), 1, probe_interval_s=1.0)


def _clocked(evs: EvSet, slow: set, window: int = 32, ticks: int = 400,
             recycle: bool = True) -> Counter:
    """`window` packets in flight; a packet comes back after 1 tick, 3 on a `slow` EV
    (a path through a queue); each one back recycles its EV and one new packet goes."""
    sent: Counter = Counter()
    flight: list = []

    def send(now: int) -> None:
        path = evs.next()
        sent[path.ev] += 1
        flight.append((now + (3 if path in slow else 1), path))

    for _ in range(window):
        send(0)
    for now in range(1, ticks):
        back = [p for due, p in flight if due <= now]
        flight[:] = [(due, p) for due, p in flight if due > now]
        for path in back:
            if recycle:
                evs.recycle(path)
            send(now)
    return sent


def test_a_slow_evs_share_falls_to_what_its_path_returns():
    evs = _evs()
    slow = set(evs.paths[:4])
    sent = _clocked(evs, slow)
    share = sum(sent[p.ev] for p in slow) / sum(sent.values())
    rr = _clocked(_evs(), set(_evs().paths[:4]), recycle=False)  # the round robin: half
    assert abs(sum(rr[p.ev] for p in _evs().paths[:4]) / sum(rr.values()) - 0.5) < 0.02
    assert 0.2 < share < 0.3, share  # self-clocked: 1 / (1 + 3)
    assert evs.lb.recycled == sum(sent.values()) - 32  # every pick after the first window


def test_recycled_evs_go_first_in_the_order_acknowledged_and_retired_ones_are_skipped():
    evs = _evs()
    a, b, c = evs.paths[5], evs.paths[2], evs.paths[6]
    for path in (a, b, c):
        evs.recycle(path)
    evs._retire(b, 0.0)
    assert evs.next() is a and evs.next() is c  # b retired since: not sent on
    assert evs.next() in evs.paths  # nothing left to recycle: the round robin


def test_a_hot_ev_is_set_aside_for_a_round_and_comes_back():
    evs = _evs()
    hot = evs.paths[3]
    evs.hot(hot.plane, hot.ev)
    evs.recycle(hot)
    first = [evs.next() for _ in range(evs.active - 1)]
    assert hot not in first and evs.lb.set_aside == 1  # neither recycled nor in turn
    later = [evs.next() for _ in range(2 * evs.active)]
    assert hot in later  # the round over, back in the round robin


def test_an_all_hot_set_still_sends():
    evs = _evs(4)
    for p in evs.paths:
        evs.hot(p.plane, p.ev)
    got = [evs.next() for _ in range(8)]
    assert len(got) == 8 and set(got) == set(evs.paths)
    one = _evs(1)
    one.hot(one.paths[0].plane, one.paths[0].ev)
    assert one.next() is one.paths[0]


def test_a_growing_window_and_dropped_entries_go_round_robin():
    evs = _evs()
    evs.recycle(evs.paths[4])
    assert evs.next() is evs.paths[4]
    assert [evs.next() for _ in range(3)] == evs.paths[1:4]  # nothing recycled: in turn


def test_the_same_acknowledgements_give_the_same_choices():
    runs = []
    for _ in range(2):
        evs = _evs(16, seed=11)
        sent = _clocked(evs, set(evs.paths[::3]), ticks=100)
        runs.append((sorted(sent.items()), evs.lb.recycled, evs.lb.picks))
    assert runs[0] == runs[1]


def test_a_lost_evs_stale_recycled_entry_does_not_bring_it_back():
    evs = _evs(8)
    dead = evs.paths[1]
    evs.recycle(dead)
    evs._retire(dead, 0.0)
    assert dead.state is EvState.ASSUMED_BAD
    assert all(evs.next() is not dead for _ in range(40))


def _sprayed(slow_delay: int, ce_ev: int | None = None) -> MrcSender:
    """A real sender and receiver in memory, 8 EVs, a 16-packet window: packets on the
    first 4 EVs arrive `slow_delay` steps late (a queue on their path; each EV keeps its
    order), packets on `ce_ev` arrive CE-marked. The sender once all is acknowledged."""
    mem = MemoryTable()
    dst = bytearray(256 * MTU)
    mr = mem.register(dst)
    src = bytearray(random.Random(2).randbytes(len(dst)))
    evs = EvSet(entropy_values(4, 8), 2, probe_interval_s=1.0)
    cc = Nscc(NsccParams(MTU, base_rtt_s=1e-3, target_s=1.0, max_cwnd=16 * MTU,
                         init_cwnd=16 * MTU), 0.0)
    tx = MrcSender(0x11, 0x22, evs, cc, SenderConfig(mtu=MTU, ack_timeout_s=1.0))
    rx = MrcReceiver(0x22, 0x11, mem)
    for i, off in enumerate(range(0, len(dst), 16 * MTU)):
        tx.post_write(i, memoryview(src)[off:off + 16 * MTU], mr.va + off, mr.rkey)
    slow = {p.ev for p in evs.paths[:4]}
    flight: list = []
    for step in range(2000):
        now = step * 1e-3
        for p in tx.poll(now, 64):
            tos = 18 << 2 | (3 if p.ev == ce_ev else 2)
            flight.append((step + (slow_delay if p.ev in slow else 0), build(p, A, B, tos, 1)))
        due = [d for s, d in flight if s <= step]
        flight = [(s, d) for s, d in flight if s > step]
        replies = [r for d in due for r in rx.receive(parse(d), now)]
        for r in replies + rx.flush(now):
            tx.receive(parse(build(r, B, A, 48 << 2, 1)), now)
        if tx.idle:
            break
    assert tx.idle and dst == src and tx.counters.retransmitted_packets == 0
    return tx


def test_the_sender_recycles_what_its_sacks_acknowledge():
    """The sender's SACK handling feeds the choice: EVs whose packets come back 3 steps
    late get fewer packets (the round robin gave them half), and a CE echo sets its EV
    aside."""
    even = _sprayed(0)
    late = _sprayed(3)
    share = sum(p.packets for p in late.evs.paths[:4]) / late.counters.packets_sent
    assert even.evs.lb.recycled > 200 and late.evs.lb.set_aside == 0
    assert share < 0.4, share
    marked = _sprayed(0, ce_ev=even.evs.paths[5].ev)
    assert marked.evs.lb.set_aside > 0
    assert marked.evs.paths[5].packets < min(p.packets for p in marked.evs.paths[:5])
