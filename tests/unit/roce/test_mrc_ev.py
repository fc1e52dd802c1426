"""The EV set's policies on what acknowledgements prove (emulator/roce/mrc_ev.py): a
resend goes on an EV acknowledged lately, and a plane whose EVs die while the other
planes are acknowledged is presumed lost at once. The last tests run a real sender and
receiver over a two-plane "fabric" that loses plane 1."""

from __future__ import annotations

import random
import socket

from emulator.roce.memory import MemoryTable
from emulator.roce.mrc_ev import PLANE_EVIDENCE, PLANE_SILENCE, EvSet, EvState, entropy_values
from emulator.roce.mrc_receiver import MrcReceiver
from emulator.roce.mrc_sender import MrcSender, SenderConfig
from emulator.roce.mrc_wire import MrcOpcode, build, parse
from emulator.roce.nscc import Nscc, NsccParams

MTU = 1024
A, B = socket.inet_aton("10.0.0.1"), socket.inet_aton("10.0.0.2")


def _two_planes(per_plane: int = 8, floor: int = 2) -> EvSet:
    return EvSet(entropy_values(7, per_plane, planes=2), floor, probe_interval_s=1.0)


def _plane(evs: EvSet, plane: int) -> list:
    return [p for p in evs.paths if p.plane == plane]


def test_a_resend_goes_on_an_ev_acknowledged_lately():
    evs = EvSet(entropy_values(3, 8), 1, probe_interval_s=1.0)
    alive = evs.paths[:3]
    for _ in range(10):  # only three EVs' packets are acknowledged (the others' path died)
        for p in alive:
            evs.acked(p)
    for _ in range(20):
        got = evs.next(avoid=alive[0])
        assert got in alive[1:]  # never the one it was lost on, never an unproven one
    assert evs.next() in evs.paths  # new data still goes round robin over every usable EV


def test_a_resend_falls_back_to_round_robin_when_nothing_was_acknowledged_lately():
    evs = EvSet(entropy_values(3, 4), 1, probe_interval_s=1.0)
    first = evs.paths[0]
    assert all(evs.next(avoid=first) is not first for _ in range(8))
    one = EvSet(entropy_values(3, 1), 1, probe_interval_s=1.0)
    assert one.next(avoid=one.paths[0]) is one.paths[0]  # the only usable EV


def test_a_plane_is_presumed_lost_once_its_evs_die_while_the_other_plane_is_acked():
    evs = _two_planes()
    for p in evs.paths:
        evs.acked(p)
    lost, kept = _plane(evs, 1), _plane(evs, 0)
    for p in kept:  # plane 0 keeps being acknowledged, plane 1 falls silent
        evs.acked(p)
    assert evs.retire(lost[0], 5.0) and evs.active == 15  # one EV: just that one
    assert evs.retire(lost[1], 5.0)  # the evidence: plane 1 is gone
    assert PLANE_EVIDENCE == 2 and evs.planes_lost == 1
    assert all(p.state is EvState.ASSUMED_BAD for p in lost) and evs.active == 8
    assert all(evs.next().plane == 0 for _ in range(20))
    assert len(evs.probes_due(5.0)) == 6  # the presumed ones probed at once ...
    evs.answered(1, lost[5].ev, 0.001)  # ... and one that answers is back
    assert lost[5].state is EvState.GOOD and evs.active == 9


def test_no_plane_rule_while_the_plane_is_still_acknowledged():
    evs = _two_planes()
    lost = _plane(evs, 1)
    evs.acked(_plane(evs, 0)[0])
    evs.retire(lost[0], 1.0)
    evs.acked(lost[3])  # plane 1 answers in between: its paths, not the plane, fail
    evs.retire(lost[1], 1.0)
    assert evs.planes_lost == 0 and evs.active == 14


def test_no_plane_rule_when_the_whole_connection_stalls_or_has_one_plane():
    stall = _two_planes()
    for p in stall.paths:
        stall.acked(p)
    lost = _plane(stall, 1)  # nothing acknowledged anywhere since: the peer, not a plane
    assert stall.retire(lost[0], 1.0) and stall.retire(lost[1], 1.0)
    assert stall.planes_lost == 0 and stall.active == 14
    one = EvSet(entropy_values(7, 8), 2, probe_interval_s=1.0)
    one.acked(one.paths[7])
    for p in one.paths[:3]:
        one.retire(p, 1.0)
    assert one.planes_lost == 0 and one.active == 5


def test_the_plane_rule_keeps_the_floor():
    evs = _two_planes(per_plane=8, floor=12)
    evs.acked(_plane(evs, 0)[0])
    lost = _plane(evs, 1)
    evs.retire(lost[0], 1.0)
    evs.retire(lost[1], 1.0)
    assert evs.planes_lost == 1 and evs.active == 12  # 4 of plane 1 left: the floor


def test_a_plane_silent_while_the_other_is_acknowledged_is_presumed_lost_before_any_timeout():
    evs = _two_planes()  # probe interval 1 s: silence after PLANE_SILENCE s
    silence = PLANE_SILENCE * 1.0
    evs.probes_due(0.0)
    t = 0.0
    while t < silence + 0.05:  # plane 0 acknowledged every 10 ms, plane 1 never
        t += 0.01
        evs.acked(_plane(evs, 0)[int(t * 100) % 8])
        evs.probes_due(t)
        if evs.planes_lost:
            break
    assert evs.planes_lost == 1 and silence <= t < silence + 0.02
    assert all(p.state is EvState.ASSUMED_BAD for p in _plane(evs, 1)) and evs.active == 8


def test_no_silent_plane_while_both_are_acknowledged_or_neither_is():
    evs = _two_planes()
    evs.probes_due(0.0)
    for i in range(100):  # both planes, each SACK covering both (cumulative ack)
        evs.acked(evs.paths[i % 16])
        evs.probes_due(i * 0.01)
    for i in range(100):  # then nothing at all: an idle or stalled connection
        evs.probes_due(1.0 + i * 0.01)
    assert evs.planes_lost == 0 and evs.active == 16
    one = EvSet(entropy_values(7, 8), 2, probe_interval_s=1.0)
    for i in range(100):
        one.probes_due(i * 0.01)
    assert one.planes_lost == 0


class TwoPlanes:
    """A sender and receiver joined in memory over two planes; `plane_down` loses every
    packet sent on plane 1 (data and probes), as a plane that lost its spines."""

    def __init__(self, size: int, per_plane: int = 16, ack_timeout: float = 0.1):
        self.mem = MemoryTable()
        self.dst = bytearray(size)
        mr = self.mem.register(self.dst)
        self.src = bytearray(random.Random(1).randbytes(size))
        evs = EvSet(entropy_values(9, per_plane, planes=2), per_plane // 2, probe_interval_s=0.05)
        # a window of many round trips (1 ms here) as on the shaped lab (~40 ms, 1 s
        # timeout): a lost plane takes several round trips to fill it
        cc = Nscc(NsccParams(MTU, base_rtt_s=1e-3, target_s=0.5e-3, max_cwnd=512 * MTU,
                             init_cwnd=512 * MTU), 0.0)
        self.tx = MrcSender(0x11, 0x22, evs, cc, SenderConfig(mtu=MTU, ack_timeout_s=ack_timeout))
        self.rx = MrcReceiver(0x22, 0x11, self.mem)
        for i, off in enumerate(range(0, size, 8 * MTU)):
            self.tx.post_write(i, memoryview(self.src)[off:off + 8 * MTU], mr.va + off, mr.rkey)
        self.plane_down = False
        self.now = 0.0
        self.resent_on: list[int] = []  # the plane of every resend after the plane went

    def run(self, steps: int, dt: float = 1e-3) -> None:
        resent = self.tx.counters.retransmitted_packets
        for _ in range(steps):
            self.now += dt
            out = self.tx.poll(self.now, 16)
            if self.tx.counters.retransmitted_packets > resent:  # a resend is out[0..]
                self.resent_on += [p.plane for p in out[:self.tx.counters.retransmitted_packets
                                                        - resent] if p.is_data]
                resent = self.tx.counters.retransmitted_packets
            out = [parse(build(p, A, B, 18 << 2 | 2, 1)) for p in out
                   if not (self.plane_down and p.plane == 1 and p.opcode != MrcOpcode.SACK)]
            replies = [r for p in out for r in self.rx.receive(p, self.now)]
            for r in replies + self.rx.flush(self.now):
                self.tx.receive(parse(build(r, B, A, 48 << 2, 1)), self.now)
            if self.tx.idle:
                return


def test_a_lost_plane_is_left_before_its_ack_timeout_and_resends_go_to_the_plane_left():
    """Plane 1 dies at the start of a fresh connection (as `after` in the plane-loss
    experiment): its EVs retire once it has been silent for PLANE_SILENCE of the ACK
    timeout, before any packet times out, so the window stops filling with packets it
    swallows (the connection stalled for an ACK timeout), and the packets it swallowed are
    resent at once, on plane 0 only (before, EVs not yet used there swallowed resends:
    a second timeout)."""
    early = TwoPlanes(600 * MTU)
    early.plane_down = True
    early.run(steps=90)  # 90 ms: short of the 100 ms ACK timeout
    assert early.tx.evs.planes_lost == 1 and early.tx.counters.timeouts == 0
    assert all(p.state is not EvState.GOOD for p in _plane(early.tx.evs, 1))
    # ... and what it swallowed is resent then (on plane 0), not at its ACK timeout
    assert early.tx.counters.retransmitted_packets > 0 and set(early.resent_on) == {0}
    clean = TwoPlanes(600 * MTU)
    clean.run(steps=5000)
    assert clean.tx.idle and clean.tx.counters.timeouts == 0
    net = TwoPlanes(600 * MTU)
    net.plane_down = True
    net.run(steps=5000)
    assert net.tx.idle and net.dst == net.src
    assert net.tx.evs.planes_lost >= 1
    assert all(p.state is not EvState.GOOD for p in _plane(net.tx.evs, 1))
    # only plane 1 loses: a resend never on it means no packet was lost twice
    assert net.resent_on and set(net.resent_on) == {0}
    # at one plane's pace, plus at most the lost packets' one timeout (100 ms)
    assert net.now < 2 * clean.now + 0.1, (net.now, clean.now)
