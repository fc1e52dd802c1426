"""The lean per-packet paths, each checked against the readable one it stands for.

- `FrameBuilder.build_into` (any buffer) against `build`;
- `icrc.check_in_place` (masks the receive buffer) against `check_icrc`;
- `SendBatch` (sendmmsg through ctypes) against the datagrams it was given,
  over a UDP socket on loopback, so no root is needed;
- the requester's burst loop: opcodes, RETH, AckReq and retransmission counts;
- the `Endpoint` loop: bounded receive turns, and sleeping (not spinning)
  while a full window waits for ACKs.
"""

from __future__ import annotations

import ctypes
import errno
import socket
import time
import zlib
from collections import deque

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulator.roce.endpoint import Endpoint
from emulator.roce.fastpath import FrameBuilder, Segment, parse
from emulator.roce.headers import Opcode, Syndrome
from emulator.roce.icrc import check_icrc, check_in_place, crc32
from emulator.roce.memory import MemoryTable
from emulator.roce.rc import QueuePair
from emulator.roce.transport import SLOT_SIZE, SendBatch
from emulator.roce.verbs import QpConfig

FAST = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
u24 = st.integers(0, (1 << 24) - 1)
segments = st.builds(
    Segment,
    opcode=st.sampled_from([op for op in Opcode if op != Opcode.CNP]), dest_qp=u24, psn=u24,
    ackreq=st.booleans(), va=st.integers(0, (1 << 64) - 1), rkey=st.integers(0, (1 << 32) - 1),
    dma_length=st.integers(0, (1 << 32) - 1), syndrome=st.integers(0, 255), msn=u24,
    payload=st.binary(max_size=600), becn=st.booleans(),
)
A, B = "192.0.2.1", "192.0.2.2"


# -- codec ----------------------------------------------------------------------

@FAST
@given(segments, st.integers(0, 0xFFFF), st.integers(0, 255))
def test_build_into_any_buffer_equals_build(seg: Segment, ip_id: int, tos: int) -> None:
    builder = FrameBuilder(A, B, 0xC123)
    want = bytes(builder.build(seg, ip_id, tos))
    slot = memoryview((ctypes.c_char * (2 * SLOT_SIZE))()).cast("B")[SLOT_SIZE:]
    slot[:] = b"\xaa" * SLOT_SIZE  # stale bytes from an earlier datagram must not leak in
    n = builder.build_into(seg, ip_id, tos, slot)
    assert bytes(slot[:n]) == want and n <= builder.max_datagram <= SLOT_SIZE


@FAST
@given(segments, st.integers(0, 255), st.integers(1, 255), st.booleans())
def test_check_in_place_agrees_with_check_icrc(seg: Segment, tos: int, ttl: int,
                                               corrupt: bool) -> None:
    wire = bytearray(FrameBuilder(A, B, 0xC000).build(seg, 7, 0x02))
    wire[1], wire[8] = tos, ttl  # what a router may change: ECN (CE marks), TTL, checksum
    wire[10:12] = b"\x12\x34"
    if corrupt:  # a bit of the payload, or of the ICRC itself when there is none
        wire[40 + len(seg.payload) // 2 if seg.payload else -1] ^= 0x40
    want = check_icrc(bytes(wire))
    assert want == (not corrupt)
    before = parse(memoryview(bytes(wire)))
    assert check_in_place(wire, len(wire)) == want
    # it masked the variant fields in place, and nothing parse reports from beyond them
    assert wire[1] == wire[8] == wire[32] == 0xFF
    after = parse(memoryview(bytes(wire)))
    assert after.payload == before.payload and after.psn == before.psn


@FAST
@given(st.binary(max_size=5000), st.integers(0, (1 << 32) - 1))
def test_the_crc32_in_use_is_zlibs(data: bytes, start: int) -> None:
    """icrc.crc32 may be zlib-ng's (faster) when installed: same function."""
    assert crc32(memoryview(data), start) == zlib.crc32(data, start)
    assert crc32(bytearray(data)) == zlib.crc32(data)


def test_check_in_place_on_the_rxe_captures(all_frames) -> None:
    results = [check_in_place(bytearray(f[14:]), len(f) - 14) for f in all_frames]
    assert results == [check_icrc(f[14:]) for f in all_frames]
    assert results.count(False) == 1  # the one deliberately corrupted frame


# -- SendBatch (sendmmsg) -----------------------------------------------------------

def test_send_batch_delivers_each_datagram_once_in_order(loopback_udp) -> None:
    tx, rx = loopback_udp
    batch = SendBatch(capacity=4)
    to = batch.address("127.0.0.1", rx.getsockname()[1])
    builder = FrameBuilder(A, B, 0xC000, max_payload=4096)
    segs = [Segment(Opcode.WRITE_MIDDLE, 0x12, psn, payload=bytes([psn]) * (100 * psn + 1))
            for psn in range(1, 7)]
    want, got, full = [], [], []
    for i, seg in enumerate(segs):
        full.append(batch.add(builder, seg, i + 1, 0x02, to))
        want.append(bytes(builder.build(seg, i + 1, 0x02)))
        assert bytes(batch.datagram(batch.count - 1)) == want[-1]
        if full[-1]:
            assert batch.send(tx.fileno()) == (4, 0, sum(map(len, want[:4])))
    assert full == [False, False, False, True, False, False] and batch.count == 2
    assert batch.send(tx.fileno()) == (2, 0, sum(map(len, want[4:])))
    assert batch.count == 0 and batch.send(tx.fileno()) == (0, 0, 0)
    for _ in segs:
        got.append(rx.recv(65536))
    assert got == want


def test_send_batch_addresses_are_exact(loopback_udp) -> None:
    """Every byte of the address counts (an earlier ctypes char array cut it at a zero byte)."""
    batch = SendBatch(capacity=1)
    for ip in ("10.0.0.1", "10.250.0.0", "192.0.2.255"):
        raw = ctypes.string_at(batch.address(ip, 4791), 8)
        assert raw[2:4] == (4791).to_bytes(2, "big") and raw[4:8] == socket.inet_aton(ip)
    assert batch.address("10.0.0.1", 4791) == batch.address("10.0.0.1", 4791)


def test_send_batch_raises_other_errors_and_empties() -> None:
    batch = SendBatch(capacity=2)
    batch.add(FrameBuilder(A, B, 0xC000), Segment(Opcode.SEND_ONLY, 1, 1), 1, 0,
              batch.address("127.0.0.1", 9))
    with pytest.raises(OSError) as info:
        batch.send(-1)
    assert info.value.errno == errno.EBADF and batch.count == 0


# -- the requester's burst loop ---------------------------------------------------------

def test_burst_sets_reth_ackreq_and_counts_retransmissions() -> None:
    qp = QueuePair(QpConfig(qpn=1, remote_qpn=2, mtu=256, window=4, rto=1.0), MemoryTable())
    data = bytes(range(256)) * 6 + b"tail"  # 7 packets
    qp.post_write(9, data, 0x1000, 0x77)
    first = qp.poll(0.0, budget=64)
    assert [(s.opcode, s.psn, s.ackreq) for s in first] == [
        (Opcode.WRITE_FIRST, 0, False), (Opcode.WRITE_MIDDLE, 1, False),
        (Opcode.WRITE_MIDDLE, 2, False), (Opcode.WRITE_MIDDLE, 3, True)]  # 3 fills the window
    assert (first[0].va, first[0].rkey, first[0].dma_length) == (0x1000, 0x77, len(data))
    assert all((s.va, s.rkey, s.dma_length) == (0, 0, 0) for s in first[1:])
    assert [bytes(s.payload) for s in first] == [data[i * 256:(i + 1) * 256] for i in range(4)]
    ack = Segment(Opcode.ACK, 1, 1, syndrome=Syndrome.ACK)
    qp.receive(ack, 0.1)  # una = 2: room for two more
    more = qp.poll(0.1, budget=64)
    assert [(s.psn, s.ackreq) for s in more] == [(4, False), (5, True)]
    assert qp.poll(2.0, budget=64)[0].psn == 2  # timeout: back to una
    assert qp.counters.retransmitted_packets == 4 and qp.counters.packets_sent == 10
    qp.receive(Segment(Opcode.ACK, 1, 5, syndrome=Syndrome.ACK), 2.1)
    last = qp.poll(2.1, budget=64)
    assert [(s.opcode, s.psn, s.ackreq, bytes(s.payload)) for s in last] == [
        (Opcode.WRITE_LAST, 6, True, b"tail")]


def test_read_responses_are_built_per_position() -> None:
    memory = MemoryTable()
    source = bytearray(range(256)) * 3
    mr = memory.register(source)
    qp = QueuePair(QpConfig(qpn=2, remote_qpn=1, mtu=256), memory)
    qp.receive(Segment(Opcode.READ_REQUEST, 2, 0, False, mr.va, mr.rkey, len(source)), 0.0)
    out = qp.poll(0.0, budget=2) + qp.poll(0.0, budget=2)
    assert [(s.opcode, s.psn, s.syndrome, s.msn) for s in out] == [
        (Opcode.READ_RESPONSE_FIRST, 0, Syndrome.ACK, 1), (Opcode.READ_RESPONSE_MIDDLE, 1, 0, 0),
        (Opcode.READ_RESPONSE_LAST, 2, Syndrome.ACK, 1)]
    assert b"".join(bytes(s.payload) for s in out) == source


# -- the Endpoint loop ------------------------------------------------------------------

class FakeTransport:
    """What Endpoint needs of a Transport: a pollable fd, an inbox, a record of sends."""

    local_ip = A

    def __init__(self) -> None:
        self.on_bad_icrc = None
        self.inbox: deque[Segment] = deque()
        self.sent: list[Segment] = []
        self.flushes = 0
        self._wake, self._wake_tx = socket.socketpair()

    def fileno(self) -> int:
        return self._wake.fileno()

    def wake(self) -> None:
        self._wake_tx.send(b"!")

    def flow(self, builder: FrameBuilder, ip: str) -> object:
        return None

    def queue(self, flow: object, segs: list[Segment], tos: int, cnp_tos: int) -> None:
        self.sent.extend(segs)

    def flush(self) -> int:
        self.flushes += 1
        return 0

    paused = False  # a paused port: the kernel refuses sends, nothing has room

    @property
    def blocked(self) -> bool:
        return self.paused

    def room(self) -> int:
        return 0 if self.paused else 64

    def recv_burst(self, limit: int) -> list[Segment]:
        return [self.inbox.popleft() for _ in range(min(limit, len(self.inbox)))]

    def close(self) -> None:
        self._wake.close()
        self._wake_tx.close()


@pytest.fixture
def fake():
    transport = FakeTransport()
    yield transport
    transport.close()


PEER_ADDR = int.from_bytes(socket.inet_aton(B), "big")


def test_full_window_sleeps_in_select_until_an_ack(fake: FakeTransport) -> None:
    ep = Endpoint(fake)  # type: ignore[arg-type]
    qp = QueuePair(QpConfig(qpn=1, remote_qpn=2, mtu=256, window=4, rto=5.0), MemoryTable())
    ep.add(qp, B)
    qp.post_write(1, bytes(256 * 10), 0x1000, 7)
    assert ep.step(max_wait=0.3) == 4 and len(fake.sent) == 4  # the window is full now
    wall, cpu = time.monotonic(), time.process_time()
    assert ep.step(max_wait=0.3) == 0
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    assert wall >= 0.25 and cpu < 0.1, (wall, cpu)  # blocked, did not spin
    fake.inbox.append(Segment(Opcode.ACK, 1, 1, syndrome=Syndrome.ACK, src_ip=PEER_ADDR))
    fake.wake()
    start = time.monotonic()
    assert ep.step(max_wait=5.0) == 1 + 2  # the ACK in, two more packets out
    assert time.monotonic() - start < 1.0
    assert [s.psn for s in fake.sent] == [0, 1, 2, 3, 4, 5]


def test_a_paused_port_holds_packets_back_instead_of_losing_them(fake: FakeTransport) -> None:
    ep = Endpoint(fake)  # type: ignore[arg-type]
    qp = QueuePair(QpConfig(qpn=1, remote_qpn=2, mtu=256, window=8, rto=5.0), MemoryTable())
    ep.add(qp, B)
    qp.post_write(1, bytes(256 * 4), 0x1000, 7)
    fake.paused = True
    start = time.monotonic()
    assert ep.step(max_wait=0.2) == 0 and fake.sent == []  # nothing taken from the QP
    assert time.monotonic() - start < 0.05  # but it comes back soon to retry
    fake.paused = False
    assert ep.step() == 4 and [s.psn for s in fake.sent] == [0, 1, 2, 3]
    assert qp.counters.retransmitted_packets == 0


def test_wait_is_cut_short_by_the_retransmission_timer(fake: FakeTransport) -> None:
    ep = Endpoint(fake)  # type: ignore[arg-type]
    qp = QueuePair(QpConfig(qpn=1, remote_qpn=2, mtu=256, window=2, rto=0.05), MemoryTable())
    ep.add(qp, B)
    qp.post_write(1, bytes(256 * 4), 0x1000, 7)
    ep.step(max_wait=5.0)
    start = time.monotonic()
    ep.step(max_wait=5.0)  # nothing arrives: sleeps only until the RTO is due
    assert 0.03 <= time.monotonic() - start < 1.0
    assert ep.step() == 2 and qp.counters.timeouts == 1  # then resends from una


def test_a_receive_turn_is_bounded_so_acks_are_not_held_back(fake: FakeTransport) -> None:
    memory = MemoryTable()
    sink = bytearray(256 * 100)
    mr = memory.register(sink)
    ep = Endpoint(fake, rx_batch=32)  # type: ignore[arg-type]
    qp = QueuePair(QpConfig(qpn=2, remote_qpn=1, mtu=256, ack_every=16), memory)
    ep.add(qp, B)
    for psn in range(100):
        opcode = (Opcode.WRITE_FIRST if psn == 0 else
                  Opcode.WRITE_LAST if psn == 99 else Opcode.WRITE_MIDDLE)
        fake.inbox.append(Segment(opcode, 2, psn, psn == 99, mr.va, mr.rkey, len(sink),
                                  payload=bytes([psn]) * 256, src_ip=PEER_ADDR))
    assert ep.step() == 32 + 1  # 32 in, then one (coalesced) ACK out before the rest
    assert [(s.opcode, s.psn) for s in fake.sent] == [(Opcode.ACK, 31)]
    assert len(fake.inbox) == 68 and fake.flushes == 1
    while fake.inbox:
        ep.step()
    assert fake.sent[-1].psn == 99 and sink == b"".join(bytes([i]) * 256 for i in range(100))


def test_segments_from_the_wrong_peer_or_qp_are_counted_not_delivered(
        fake: FakeTransport) -> None:
    ep = Endpoint(fake)  # type: ignore[arg-type]
    qp = QueuePair(QpConfig(qpn=1, remote_qpn=2), MemoryTable())
    ep.add(qp, B)
    fake.inbox.extend([Segment(Opcode.SEND_ONLY, 1, 0, True, payload=b"x", src_ip=PEER_ADDR + 1),
                       Segment(Opcode.SEND_ONLY, 9, 0, True, payload=b"x", src_ip=PEER_ADDR)])
    ep.step()
    assert ep.unknown_qp == 2 and qp.counters.rx_packets == 0 and fake.sent == []


def test_send_batch_keeps_what_the_kernel_refuses(monkeypatch) -> None:
    """A paused port (qdisc full: ENOBUFS) must hold datagrams, in order, not lose them."""
    from emulator.roce import sendbatch

    accept = [1]  # datagrams the fake kernel takes on its next call, then it refuses

    def fake_sendmmsg(fd, msgs, n, flags):
        if not accept:
            ctypes.set_errno(errno.ENOBUFS)
            return -1
        return min(n, accept.pop())

    monkeypatch.setattr(sendbatch, "_sendmmsg", fake_sendmmsg)
    batch = SendBatch(capacity=4)
    to = batch.address("127.0.0.1", 4791)
    builder = FrameBuilder(A, B, 0xC000, max_payload=4096)
    want = []
    for psn in range(1, 5):
        seg = Segment(Opcode.WRITE_MIDDLE, 0x12, psn, payload=bytes([psn]) * (10 * psn))
        batch.add(builder, seg, psn, 0x02, to)
        want.append(bytes(builder.build(seg, psn, 0x02)))
    assert batch.send(0) == (1, 3, len(want[0]))  # one went, the port filled up
    assert batch.count == 3 and batch.room == 1
    assert [bytes(batch.datagram(i)) for i in range(3)] == want[1:]  # kept, in order
    assert batch.send(0) == (0, 3, 0)  # still paused: nothing lost, nothing sent
    accept.append(8)
    assert batch.send(0) == (3, 0, sum(map(len, want[1:])))
    assert batch.count == 0


# -- runs: the burst form of the same packets ---------------------------------------------

@FAST
@given(st.lists(st.integers(1, 40 * 256), min_size=1, max_size=4), st.integers(2, 64),
       st.integers(1, 70), st.integers(0, (1 << 24) - 1), st.booleans())
def test_poll_with_runs_stands_for_the_same_segments(sizes: list[int], window: int, budget: int,
                                                      psn: int, read: bool) -> None:
    """QueuePair.poll(runs=True), expanded, is poll() exactly: the same packets, PSNs
    (wrapping), AckReq, RETH, READ responses, and the same counters after."""
    from emulator.roce.fastpath import Run, expand

    got = []
    for runs in (False, True):
        memory = MemoryTable()
        mr = memory.register(bytearray(range(256)) * 200)
        cfg = QpConfig(qpn=1, remote_qpn=2, mtu=256, window=window, send_psn=psn, recv_psn=psn)
        qp = QueuePair(cfg, memory)
        for i, n in enumerate(sizes):
            if read:  # the peer asks: this side sends READ responses
                qp.receive(Segment(Opcode.READ_REQUEST, 1, (psn + 64 * i) & 0xFFFFFF, False,
                                   mr.va, mr.rkey, n), 0.0)
            else:
                qp.post_write(i, bytes(range(256)) * (n // 256 + 1), 0x1000, 7)
        polls = [qp.poll(0.0, budget, runs) for _ in range(3)]
        assert all(sum(x.packets if type(x) is Run else 1 for x in p) <= budget for p in polls)
        got.append(([[(*s[:9], bytes(s.payload), *s[10:]) for s in expand(p)] for p in polls],
                    qp.counters.as_dict()))
    assert got[0] == got[1]
