"""The sans-IO MRC core: wire format, EV set, NSCC, sender and receiver together.

Packets cross an in-memory "fabric" as real datagrams (mrc_wire.build/parse),
which loses what a test tells it to (an EV's path, one PSN, or trims it)."""

from __future__ import annotations

import random
import socket

import pytest

from emulator.roce.errors import MalformedPacket
from emulator.roce.memory import MemoryTable
from emulator.roce.mrc_ev import EvSet, EvState, entropy_values
from emulator.roce.mrc_receiver import MrcReceiver
from emulator.roce.mrc_sender import MrcSender, Pacer, SenderConfig
from emulator.roce.mrc_wire import (
    MrcFlag,
    MrcOpcode,
    MrcPacket,
    NackCode,
    build,
    is_mrc,
    parse,
)
from emulator.roce.nscc import Action, Nscc, NsccParams

A, B = socket.inet_aton("10.0.0.1"), socket.inet_aton("10.0.0.2")
MTU = 1024


def _nscc(init: int = 64 * MTU, now: float = 0.0) -> Nscc:
    return Nscc(NsccParams(MTU, base_rtt_s=1e-3, target_s=0.5e-3, max_cwnd=256 * MTU,
                           init_cwnd=init), now)


class Net:
    """Sender and receiver joined by lists of datagrams, with loss and trimming hooks."""

    def __init__(self, size: int, evs: int = 8, floor: int = 2, seed: int = 3):
        self.mem = MemoryTable()
        self.dst = bytearray(size)
        self.mr = self.mem.register(self.dst)
        self.src = bytearray(random.Random(seed).randbytes(size))
        ev_set = EvSet(entropy_values(seed, evs), floor, probe_interval_s=0.01)
        self.tx = MrcSender(0x11, 0x22, ev_set, _nscc(), SenderConfig(mtu=MTU, ack_timeout_s=0.05))
        self.rx = MrcReceiver(0x22, 0x11, self.mem)
        self.dead_evs: set[int] = set()
        self.drop_psns: set[int] = set()
        self.trim_psns: set[int] = set()
        self.shuffle = False
        self.spray = False  # reorder across EVs, each EV keeping its own order
        self.hold: list[MrcPacket] = []  # packets a sprayed fabric has not delivered yet
        self.sent_psns: list[int] = []
        self.now = 0.0

    def post(self, chunk: int = 8 * MTU) -> None:
        for i, off in enumerate(range(0, len(self.src), chunk)):
            view = memoryview(self.src)[off:off + chunk]
            self.tx.post_write(i, view, self.mr.va + off, self.mr.rkey)

    def wire(self, p: MrcPacket) -> MrcPacket:
        return parse(build(p, A, B, 18 << 2 | 2, 1))

    def forward(self, p: MrcPacket) -> MrcPacket | None:
        if p.is_data:
            self.sent_psns.append(p.psn)
        if p.opcode in (MrcOpcode.WRITE, MrcOpcode.WRITE_IMM, MrcOpcode.PROBE) and p.ev in self.dead_evs:
            return None
        if p.is_data:
            if p.psn in self.drop_psns:
                self.drop_psns.discard(p.psn)
                return None
        d = build(p, A, B, 18 << 2 | 2, 1)
        if p.is_data and p.psn in self.trim_psns:
            self.trim_psns.discard(p.psn)
            d = bytearray(d[:114])
            d[40] |= MrcFlag.TRIMMED
            d[2:4] = (114).to_bytes(2, "big")
            d[24:26] = (94).to_bytes(2, "big")
        return parse(d)

    def _spray(self, out: list[MrcPacket]) -> list[MrcPacket]:
        """Each EV its own FIFO with a random delay of 0-3 steps: heavy reordering across
        EVs, none within one."""
        rng = random.Random(int(self.now * 1e6))
        self.hold += out
        by_ev: dict[int, list[MrcPacket]] = {}
        for p in self.hold:
            by_ev.setdefault(p.ev, []).append(p)
        go, self.hold = [], []
        for queue in by_ev.values():
            n = len(queue) if rng.random() < 0.3 else rng.randrange(len(queue) + 1)
            go.append(queue[:n])
            self.hold += queue[n:]
        merged: list[MrcPacket] = []
        while any(go):
            q = rng.choice([q for q in go if q])
            merged.append(q.pop(0))
        return merged

    def run(self, steps: int = 2000, dt: float = 1e-4, until_idle: bool = True) -> None:
        for _ in range(steps):
            self.now += dt
            out = [q for p in self.tx.poll(self.now, 64) if (q := self.forward(p))]
            if self.shuffle:
                random.Random(int(self.now * 1e6)).shuffle(out)
            if self.spray:
                out = self._spray(out)
            replies = [r for p in out for r in self.rx.receive(p, self.now)]
            for r in replies + self.rx.flush(self.now):
                self.tx.receive(self.wire(r), self.now)
            if until_idle and self.tx.idle:
                return


def test_wire_round_trip_and_offsets():
    p = MrcPacket(MrcOpcode.WRITE_IMM, 0xABCDE, 0x123456, MrcFlag.ACK_REQ, 3, 0xC0DE, 7, 99, 8,
                  va=0x7F0000001000, rkey=0x1234, length=8, imm=0xFEEDBEEF, payload=b"abcdefgh")
    d = build(p, A, B, 18 << 2 | 2, 5)
    assert is_mrc(d) and d[28] == 0xE1 and d[40] >> 4 == 1 and d[40] & 0xF == MrcFlag.ACK_REQ
    assert int.from_bytes(d[20:22], "big") == 0xC0DE == int.from_bytes(d[42:44], "big")
    assert d[41] == 3 and d[1] >> 2 == 18
    q = parse(d)
    assert (q.conn, q.psn, q.ev, q.msg, q.ts, q.ext, q.va, q.rkey, q.imm) == (
        0xABCDE, 0x123456, 0xC0DE, 7, 99, 8, 0x7F0000001000, 0x1234, 0xFEEDBEEF)
    assert bytes(q.payload) == b"abcdefgh"
    d[60] ^= 0xFF
    with pytest.raises(MalformedPacket):
        parse(d)


def test_sack_and_nack_round_trip():
    s = MrcPacket(MrcOpcode.SACK, 5, 100, ev=0xC001, ts=3, ext=4, bitmap=1 << 63 | 5,
                  packets=16, ce=2, echo=1, ref=0xABCDEF)
    q = parse(build(s, A, B, 0, 1))
    assert (q.bitmap, q.packets, q.ce, q.echo, q.ref) == (1 << 63 | 5, 16, 2, 1, 0xABCDEF)
    n = parse(build(MrcPacket(MrcOpcode.NACK, 5, 7, echo=NackCode.TRIMMED, ref=3), A, B, 0, 1))
    assert (n.echo, n.ref, n.psn) == (NackCode.TRIMMED, 3, 7)


def test_clean_transfer_places_every_byte():
    net = Net(200 * MTU + 123)
    net.post()
    net.run()
    assert net.tx.idle and net.dst == net.src
    assert len(net.tx.completions()) == -(-len(net.src) // (8 * MTU))
    assert net.tx.counters.retransmitted_packets == 0
    used = [p for p in net.tx.evs.paths if p.packets]
    assert len(used) == 8 and all(p.state is EvState.GOOD for p in used)


def test_cross_ev_reordering_is_not_loss():
    net = Net(600 * MTU, evs=8, floor=2)
    net.spray = True
    net.post()
    net.run(steps=5000)
    assert net.dst == net.src and net.tx.idle
    assert net.tx.evs.retirements == 0 and net.tx.counters.retransmitted_packets == 0
    assert net.tx.counters.losses == 0 == net.tx.counters.timeouts


def test_a_loss_on_one_ev_under_spraying_retires_it_and_resends_that_psn():
    net = Net(600 * MTU, evs=8, floor=2)
    net.spray = True
    net.drop_psns.add(77)
    net.post()
    net.run(steps=5000)
    assert net.dst == net.src and net.tx.idle
    assert net.tx.counters.retransmitted_packets == 1 and net.sent_psns.count(77) == 2
    assert net.tx.evs.retirements == 1 and net.tx.counters.timeouts == 0


def test_a_late_first_transmission_does_not_make_the_resend_ev_look_lossy():
    """PSN 0 is declared lost on its EV, resent on the other; then its first transmission
    arrives after all. That acknowledgement says nothing about the resend's EV: the
    packets sent there before the resend are not lost."""
    tx = MrcSender(0x11, 0x22, EvSet(entropy_values(1, 2), 2, 1.0), _nscc(),
                   SenderConfig(mtu=MTU, ack_timeout_s=10.0))
    tx.post_write(0, memoryview(bytearray(8 * MTU)), 0x1000, 7)
    ev = {p.psn: (p.plane, p.ev) for p in tx.poll(0.0, 64)}
    assert ev[0] == ev[2] != ev[1]

    def sack(cack: int, bitmap: int, ref: int) -> MrcPacket:
        plane, e = ev[ref]
        return MrcPacket(MrcOpcode.SACK, 0x11, cack, 0, plane, e, ts=0, bitmap=bitmap, ref=ref)

    tx.receive(sack(0, 1 << 1, 2), 0.001)  # PSN 2 arrived on PSN 0's EV: PSN 0 is lost
    assert tx.counters.losses == 1
    [resent] = tx.poll(0.002, 64)
    assert resent.psn == 0 and (resent.plane, resent.ev) == ev[1]
    tx.receive(sack(1, 1 << 0, 0), 0.003)  # the first transmission of PSN 0, late, on its EV
    assert tx.counters.losses == 1 and tx.poll(0.004, 64) == []  # PSNs 1, 3, 5, 7 not lost


def test_rate_cap_paces_the_connection():
    net = Net(200 * MTU)
    net.tx.config.rate_bps = 8 * MTU * 1000.0  # 1000 MTUs/s: 200 MTUs take ~0.2 s
    net.tx._pace = Pacer(net.tx.config.rate_bps, 4 * MTU)
    net.post()
    net.run(steps=20000, dt=1e-4)
    assert net.dst == net.src
    assert 0.19 <= net.now <= 0.23  # simulated time, not wall time


def test_reordered_packets_are_placed_correctly():
    net = Net(100 * MTU)
    net.shuffle = True
    net.tx.config.reorder = 10_000  # reordering, not loss
    net.post()
    net.run()
    assert net.dst == net.src and net.rx.counters.duplicates == 0


def test_dead_ev_retired_at_once_and_only_lost_psns_resent():
    net = Net(300 * MTU, evs=8, floor=2)
    dead = net.tx.evs.paths[3]
    net.dead_evs.add(dead.ev)
    net.post()
    net.run()
    assert net.dst == net.src
    assert dead.state in (EvState.ASSUMED_BAD, EvState.DENIED) and dead.retirements == 1
    assert net.tx.evs.retirements == 1  # only the dead one
    resent = {p for p in net.sent_psns if net.sent_psns.count(p) > 1}
    assert net.tx.counters.retransmitted_packets == len(resent) > 0  # each lost PSN once
    assert len(resent) == dead.packets  # exactly the packets the dead EV swallowed: no go-back-N


def test_floor_keeps_paths_when_all_fail_but_one():
    net = Net(200 * MTU, evs=4, floor=3)
    net.dead_evs.update(p.ev for p in net.tx.evs.paths[:2])
    net.post()
    net.run(steps=20000)
    assert net.dst == net.src
    assert net.tx.evs.active >= 3 - 0  # never below the floor
    assert net.tx.evs.retirements == 1  # the second dead EV hit the floor


def test_probe_returns_a_retired_ev():
    net = Net(400 * MTU, evs=4, floor=1)
    path = net.tx.evs.paths[0]
    net.dead_evs.add(path.ev)
    net.post()
    net.run(steps=700)  # past one ACK timeout (0.05 s): a dead EV has no later packets acked
    assert path.state is EvState.ASSUMED_BAD
    net.dead_evs.clear()
    net.run(steps=500, until_idle=False)
    assert path.state is EvState.GOOD and net.tx.counters.probes_answered >= 1
    assert net.dst == net.src


def test_trim_nack_resends_exactly_that_packet():
    net = Net(64 * MTU)
    net.trim_psns.add(10)
    net.post()
    net.run()
    assert net.dst == net.src
    assert net.rx.counters.trim_nacks_sent == 1 == net.tx.counters.trim_nacks_received
    assert net.tx.counters.retransmitted_packets == 1 and net.sent_psns.count(10) == 2
    assert net.tx.evs.retirements == 0  # a trim is congestion, not a dead path


def test_single_loss_resends_one_psn_only():
    net = Net(256 * MTU)
    net.drop_psns.add(40)
    net.post()
    net.run()
    assert net.dst == net.src
    assert net.tx.counters.retransmitted_packets == 1 and net.sent_psns.count(40) == 2


def test_ack_timeout_linear_then_exponential():
    net = Net(MTU)
    t = net.tx.timeout
    assert [t(k) for k in range(7)] == [0.05] * 7
    assert t(7) == 0.1 and t(8) == 0.2


def test_nscc_four_actions():
    cc = _nscc(init=64 * MTU)
    w = cc.window
    assert cc.on_ack(1.0, MTU, 1e-3, marked=False) is Action.PROPORTIONAL and cc.window > w
    w = cc.window
    assert cc.on_ack(1.0, MTU, 3e-3, marked=False) is Action.FAIR and w < cc.window < w + MTU
    w = cc.window
    assert cc.on_ack(1.0, MTU, 1.1e-3, marked=True) is Action.HOLD and cc.window == w
    assert cc.on_ack(1.0, MTU, 100e-3, marked=True) is Action.DECREASE
    assert cc.window >= w // 2  # never more than half
    w = cc.window
    assert cc.on_ack(1.0002, MTU, 100e-3, marked=True) is Action.HOLD and cc.window == w  # once per RTT
    assert cc.on_ack(1.05, MTU, 100e-3, marked=True) is Action.HOLD  # ... the RTT now is 100 ms
    assert cc.on_ack(1.101, MTU, 100e-3, marked=True) is Action.DECREASE


def test_nscc_measures_delay_from_the_lowest_rtt_not_a_configured_one_too_high():
    cc = Nscc(NsccParams(MTU, base_rtt_s=40e-3, target_s=10e-3, max_cwnd=256 * MTU,
                         init_cwnd=256 * MTU), 0.0)
    cc.on_ack(0.0, MTU, 2e-3, marked=False)  # the fabric's real unloaded RTT: 2 ms
    w = cc.window
    # 30 ms of queueing: below the configured 40 ms base RTT, far above the 10 ms target
    assert cc.on_ack(0.1, MTU, 32e-3, marked=True) is Action.DECREASE and cc.window < w


def test_nscc_quick_adapt_on_nack():
    cc = _nscc(init=128 * MTU, now=0.0)
    for i in range(10):
        cc.on_ack(0.0001 * i, MTU, 3e-3, marked=False)
    assert cc.on_nack(0.002)
    assert cc.window <= 11 * MTU
    assert not cc.on_nack(0.0021)  # once per base RTT


def test_ev_set_interleaves_planes_and_respects_floor():
    evs = entropy_values(1, 4, planes=2)
    assert [p for p, _ in evs] == [0, 1] * 4 and len({e for _, e in evs if _ == 0}) == 4
    s = EvSet(evs, 7, probe_interval_s=1.0)
    assert s.retire(s.paths[0], 0.0) and not s.retire(s.paths[1], 0.0)
    assert s.by_state()["assumed_bad"] == 1
    assert [p.ev for p in s.probes_due(1.0)] == [s.paths[0].ev]
    for t in (2.0, 3.0, 4.0):
        s.probes_due(t)
    assert s.paths[0].state is EvState.DENIED
    assert s.answered(0, s.paths[0].ev, 0.001) and s.paths[0].state is EvState.GOOD


def test_in_place_parse_checks_the_icrc_in_the_buffer():
    p = MrcPacket(MrcOpcode.WRITE, 7, 1, 0, 0, 0xC001, 0, 0, 4, va=16, rkey=1, length=4,
                  payload=b"wxyz")
    d = build(p, A, B, 18 << 2 | 3, 9)
    q = parse(d, in_place=True)
    assert q.ecn == 3 and bytes(q.payload) == b"wxyz"
    bad = build(p, A, B, 18 << 2, 9)
    bad[-6] ^= 1  # a payload byte
    with pytest.raises(MalformedPacket):
        parse(bad, in_place=True)


def test_a_write_outside_the_region_is_nacked_not_placed():
    net = Net(4 * MTU)
    p = MrcPacket(MrcOpcode.WRITE, 0x22, 0, 0, 0, 0xC001, 0, 0, 8, va=net.mr.va + 4 * MTU - 4,
                  rkey=net.mr.rkey, length=8, payload=b"12345678")
    (r,) = net.rx.receive(net.wire(p), 0.0)
    assert r.opcode == MrcOpcode.NACK and r.echo == NackCode.ACCESS
    assert net.rx.counters.access_errors == 1 and net.dst == bytearray(4 * MTU)


def _packets() -> list[MrcPacket]:
    data = bytes(range(251)) * 3
    return [
        MrcPacket(MrcOpcode.WRITE, 0xABCDE, 0xFFFFFF, 4, 1, 0xC0DE, 7, 0xFFFFFFFF, 753,
                  va=0x7F0000001003, rkey=0xDEADBEEF, length=753, payload=data),
        MrcPacket(MrcOpcode.WRITE_IMM, 1, 2, 0, 3, 0xFFFF, 1, 2, 5, va=9, rkey=1, length=5,
                  imm=0xFEEDBEEF, payload=b"abcde"),
        MrcPacket(MrcOpcode.WRITE, 1, 2, 0, 0, 0xC000, 0, 0, 0, va=9, rkey=1, length=0),
        MrcPacket(MrcOpcode.SACK, 5, 100, 0, 2, 0xC001, 3, 44, 55, bitmap=(1 << 64) - 2,
                  packets=65535, ce=17, echo=1, ref=0xABCDEF),
        MrcPacket(MrcOpcode.NACK, 5, 7, 0, 0, 0xC002, 9, 1, 2, echo=NackCode.TRIMMED_LASTHOP,
                  ref=0x123456),
        MrcPacket(MrcOpcode.PROBE, 5, 0, 0, 1, 0xC003, 0, 123, 4),
        MrcPacket(MrcOpcode.PROBE_REPLY, 5, 0, 0, 1, 0xC003, 0, 123, 4),
    ]


@pytest.fixture
def compiled():
    from emulator.roce import wire
    from emulator.roce.mrc_endpoint import compiled_mrc

    if wire.compiled() is None:  # as test_roce_wire: not built, or ROCELAB_ENGINE_PURE=1
        pytest.skip("emulator.roce._wire is not built")
    fast = compiled_mrc()
    assert fast is not None, "the compiled data path lacks mrc_build: rebuild (make setup)"
    return fast


def test_compiled_build_and_parse_agree_with_python(compiled):
    mrc_build, mrc_parse = compiled
    for p in _packets():
        want = build(p, A, B, 18 << 2 | 2, 0xBEEF)
        out = bytearray(5000)
        n = mrc_build(out, p, A, B, 18 << 2 | 2, 0xBEEF)
        assert bytes(out[:n]) == bytes(want), hex(p.opcode)
        q = mrc_parse(memoryview(bytearray(want)))
        ref = parse(bytearray(want))
        assert q is not None and type(q) is MrcPacket
        assert q._replace(payload=bytes(q.payload)) == ref._replace(payload=bytes(ref.payload))


def test_compiled_parse_refuses_what_python_refuses(compiled):
    _, mrc_parse = compiled
    good = build(_packets()[0], A, B, 0, 1)
    for mutate in (lambda d: d.__setitem__(100, d[100] ^ 1),  # payload: bad ICRC
                   lambda d: d.__setitem__(40, 0x21),  # version 2
                   lambda d: d.__setitem__(28, 0x0A),  # an RC opcode
                   lambda d: d.__setitem__(slice(22, 24), b"\x12\xb8")):  # port 4792
        bad = bytearray(good)
        mutate(bad)
        assert mrc_parse(memoryview(bad)) is None
        with pytest.raises(MalformedPacket):
            parse(bytearray(bad))
    trimmed = bytearray(good[:114])
    trimmed[40] |= MrcFlag.TRIMMED
    trimmed[2:4], trimmed[24:26] = (114).to_bytes(2, "big"), (94).to_bytes(2, "big")
    q = mrc_parse(memoryview(trimmed))
    assert q is not None and q.flags & MrcFlag.TRIMMED and q.payload == b"" and q.length == 753


def test_a_lost_plane_starts_retired_and_probed_on_the_next_connection():
    evs = EvSet(entropy_values(5, 4, planes=2), 2, probe_interval_s=1.0)
    assert not evs.plane_down(1)
    assert evs.retire_plane(1, 10.0) == 4 and evs.plane_down(1) and not evs.plane_down(0)
    assert evs.active == 4 and all(evs.next().plane == 0 for _ in range(8))
    assert len(evs.probes_due(10.0)) == 4  # probed at once: a plane that is back returns
    floor = EvSet(entropy_values(5, 4, planes=2), 6, probe_interval_s=1.0)
    assert floor.retire_plane(1, 0.0) == 2 and floor.active == 6  # never below the floor
