"""A simulated wire between two QueuePairs, for the sans-IO state machine tests.

Every segment goes through the real hot-path codec (FrameBuilder -> bytes ->
ICRC check -> parse), then through a link that drops, duplicates and
reorders as a seeded RNG says. Time is simulated: the loop advances a clock
in fixed steps and jumps over idle stretches to the next timer.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from emulator.roce import wire
from emulator.roce.fastpath import FrameBuilder, Segment, expand, parse
from emulator.roce.icrc import check_icrc
from emulator.roce.memory import MemoryTable
from emulator.roce.rc import QueuePair
from emulator.roce.verbs import Completion, QpConfig

STEP = 1e-4  # seconds of simulated time per loop turn
DELAY = 2e-4  # one-way latency of the simulated link


@dataclass
class Link:
    """One direction of the wire."""

    rng: random.Random
    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0
    drop_if: Callable[[Segment], bool] | None = None
    _queue: list[tuple[float, int, bytes]] = field(default_factory=list)
    _seq: int = 0
    sent: int = 0
    dropped: int = 0

    def send(self, now: float, seg: Segment, datagram: bytes) -> None:
        self.sent += 1
        if self.rng.random() < self.loss or (self.drop_if and self.drop_if(seg)):
            self.dropped += 1
            return
        copies = 2 if self.rng.random() < self.dup else 1
        for _ in range(copies):
            late = self.rng.uniform(0, 5 * DELAY) if self.rng.random() < self.reorder else 0
            self._seq += 1
            heapq.heappush(self._queue, (now + DELAY + late, self._seq, datagram))

    def arrivals(self, now: float) -> list[bytes]:
        out = []
        while self._queue and self._queue[0][0] <= now:
            out.append(heapq.heappop(self._queue)[2])
        return out

    @property
    def busy(self) -> bool:
        return bool(self._queue)


@dataclass
class Side:
    qp: QueuePair
    memory: MemoryTable
    builder: FrameBuilder
    out: Link
    done: list[Completion] = field(default_factory=list)
    ip_id: int = 0


def make_pair(rng: random.Random, *, mtu: int = 1024, psn_a: int = 0, psn_b: int = 0,
              **cfg: object) -> tuple[Side, Side]:
    """Two connected QPs (0x11 on 10.0.0.1, 0x12 on 10.0.0.2)."""
    sides = []
    for qpn, rqpn, me, peer, sp, rp, seed in ((0x11, 0x12, "10.0.0.1", "10.0.0.2", psn_a, psn_b,
                                               1), (0x12, 0x11, "10.0.0.2", "10.0.0.1", psn_b,
                                                    psn_a, 2)):
        conf = QpConfig(qpn=qpn, remote_qpn=rqpn, send_psn=sp, recv_psn=rp, mtu=mtu, **cfg)
        memory = MemoryTable(key_seed=seed)
        sides.append(Side(QueuePair(conf, memory), memory,
                          FrameBuilder(me, peer, 0xC000 | qpn, max_payload=mtu), Link(rng)))
    return sides[0], sides[1]


# The data path the simulation builds datagrams with: "python" (FrameBuilder, one
# Segment per packet) or "compiled" (QueuePair.poll(runs=True) and _wire.Sender, the
# engine's hot path). The RC tests run on both (their `data_path` fixture sets it).
DATA_PATH = "python"


def _datagrams(me: Side, now: float) -> tuple[list[Segment], list[bytes]]:
    """What `me` sends now: its Segments and their datagrams, built on DATA_PATH."""
    if DATA_PATH == "python":
        segs = me.qp.poll(now, budget=32)
        out = []
        for seg in segs:
            me.ip_id = (me.ip_id + 1) & 0xFFFF
            out.append(bytes(me.builder.build(seg, me.ip_id)))
        return segs, out
    _wire = wire.compiled()
    assert _wire is not None, "emulator.roce._wire is not built"
    items = me.qp.poll(now, budget=32, runs=True)
    sender = _wire.Sender(64, 4160)
    src, dst, sport, ttl, pkey = me.builder.fields()
    _, _, me.ip_id = sender.add(_wire.Flow(src, dst, sport, ttl, pkey), items, 0, 0, 0x02,
                                0x02, me.ip_id)
    return expand(items), [sender.datagram(i) for i in range(sender.count)]


def run(a: Side, b: Side, until: Callable[[], bool], limit: float = 60.0) -> float:
    """Drive both sides until `until()` is true; return the simulated time used."""
    now = 0.0
    while not until():
        if now > limit:
            raise AssertionError(f"simulation did not finish in {limit} s of simulated time")
        sent = 0
        for me, peer in ((a, b), (b, a)):
            segs, datagrams = _datagrams(me, now)
            sent += len(segs)
            for seg, datagram in zip(segs, datagrams):
                me.out.send(now, seg, datagram)
            for datagram in me.out.arrivals(now):
                assert check_icrc(datagram)
                peer.qp.receive(parse(memoryview(datagram)), now)
            me.done += me.qp.completions()
        now = _next_time(a, b, now, sent)
    return now


def _next_time(a: Side, b: Side, now: float, sent: int) -> float:
    """Step the clock; jump to the next timer when nothing is in flight."""
    if sent or a.out.busy or b.out.busy:
        return now + STEP
    deadlines = [d for d in (a.qp.next_deadline(), b.qp.next_deadline()) if d is not None]
    return max(now + STEP, min(deadlines)) if deadlines else now + STEP
