"""New packets' EVs (emulator/roce/mrc_lb.py, REPS): an acknowledged EV is recycled, so
each EV is sent on at the rate its path returns its packets; an EV whose packet came
back marked or queued is set aside for a round and then comes back."""

from __future__ import annotations

from collections import Counter

from emulator.roce.mrc_ev import EvSet, EvState, entropy_values


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
