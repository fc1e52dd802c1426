"""The sans-IO RC state machine, driven over a simulated wire (roce_sim.py)."""

from __future__ import annotations

import hashlib
import mmap
import random

import pytest
from roce_sim import Side, make_pair, run

from emulator.errors import EngineError
from emulator.roce.errors import AccessError, QpStateError
from emulator.roce.fastpath import Segment
from emulator.roce.headers import Ecn, Opcode, Syndrome
from emulator.roce.memory import Access, MemoryTable
from emulator.roce.psn import psn_add, psn_diff
from emulator.roce.rc import QueuePair
from emulator.roce.requester import MAX_QUEUED_PSNS
from emulator.roce.verbs import QpConfig, QpState, WcStatus, WrKind

# every test on both data paths: the Python codec, and runs through the compiled one
pytestmark = pytest.mark.usefixtures("data_path")


def sha(data: bytes | bytearray) -> str:
    return hashlib.sha256(data).hexdigest()


def done_when(a: Side, b: Side, n_a: int, n_b: int = 0):
    return lambda: len(a.done) >= n_a and len(b.done) >= n_b


def test_psn_arithmetic_wraps() -> None:
    assert psn_add(0xFFFFFF, 1) == 0
    assert psn_diff(0, 0xFFFFFF) == 1 and psn_diff(0xFFFFFF, 0) == -1
    assert psn_diff(5, 5) == 0 and psn_diff(0x7FFFFF, 0) == 0x7FFFFF


def test_lossless_write_read_send() -> None:
    rng = random.Random(1)
    a, b = make_pair(rng)
    data = rng.randbytes(100_000)
    sink = bytearray(len(data))
    source = bytearray(rng.randbytes(50_000))
    mr_w, mr_r = b.memory.register(sink), b.memory.register(source)
    dest = bytearray(len(source))
    a.qp.post_write(1, data, mr_w.va, mr_w.rkey)
    a.qp.post_read(2, dest, mr_r.va, mr_r.rkey)
    a.qp.post_send(3, b"done")
    run(a, b, done_when(a, b, 3, 1))
    assert [(c.wr_id, c.kind, c.status, c.byte_len) for c in a.done] == [
        (1, WrKind.WRITE, WcStatus.SUCCESS, 100_000), (2, WrKind.READ, WcStatus.SUCCESS, 50_000),
        (3, WrKind.SEND, WcStatus.SUCCESS, 4)]
    assert [(c.kind, c.data) for c in b.done] == [(WrKind.RECV, b"done")]
    assert sink == data and dest == source
    counters = a.qp.counters
    assert counters.retransmitted_packets == counters.timeouts == counters.naks_rx == 0
    assert b.qp.counters.rx_bytes == 100_004 and b.qp.counters.acks_tx > 0


def test_psn_wraps_across_0xffffff() -> None:
    rng = random.Random(2)
    a, b = make_pair(rng, mtu=256, psn_a=0xFFFFF0, psn_b=0xFFFFFE)
    data = rng.randbytes(64 * 256 + 17)
    sink = bytearray(len(data))
    mr = b.memory.register(sink)
    a.qp.post_write(1, data, mr.va, mr.rkey)
    b.qp.post_send(2, b"x" * 600)  # three packets across B's wrap
    run(a, b, done_when(a, b, 2, 1))  # A: WRITE done + RECV; B: SEND done
    assert sink == data and [c.data for c in a.done if c.kind is WrKind.RECV] == [b"x" * 600]
    assert a.qp.requester.una == psn_add(0xFFFFF0, 65) == 0x31
    assert b.qp.requester.una == psn_add(0xFFFFFE, 3) == 1


@pytest.mark.parametrize("seed", range(6))
def test_random_loss_reorder_and_duplication(seed: int) -> None:
    rng = random.Random(seed)
    a, b = make_pair(rng, mtu=512, psn_a=rng.randrange(1 << 24), psn_b=rng.randrange(1 << 24),
                     window=32, ack_every=4, rto=0.005, retry_limit=30)
    for link in (a.out, b.out):
        link.loss, link.dup, link.reorder = 0.04, 0.03, 0.05
    write, read = rng.randbytes(150_000), bytearray(rng.randbytes(90_000))
    sink, dest, back = bytearray(len(write)), bytearray(len(read)), bytearray(20_000)
    mr_w, mr_r, mr_back = b.memory.register(sink), b.memory.register(read), a.memory.register(back)
    reverse = rng.randbytes(len(back))
    a.qp.post_write(1, write, mr_w.va, mr_w.rkey)
    a.qp.post_read(2, dest, mr_r.va, mr_r.rkey)
    a.qp.post_send(3, b"end of a")
    b.qp.post_write(4, reverse, mr_back.va, mr_back.rkey)
    run(a, b, done_when(a, b, 3, 2), limit=300)
    assert all(c.status is WcStatus.SUCCESS for c in a.done + b.done)
    assert (sha(sink), sha(dest), sha(back)) == (sha(write), sha(read), sha(reverse))
    assert a.out.dropped > 0 and a.qp.counters.retransmitted_packets > 0


def test_one_nak_per_gap() -> None:
    """PSN 5 is lost on its first transmission, PSN 60 on its second (during the
    go-back-N resend): two gaps, so exactly two NAKs, however many packets
    arrive out of sequence behind each gap."""
    rng = random.Random(3)
    a, b = make_pair(rng, mtu=256)
    seen: dict[int, int] = {}
    doomed = {5: 1, 60: 2}  # PSN -> which transmission of it is lost

    def drop(seg: Segment) -> bool:
        seen[seg.psn] = seen.get(seg.psn, 0) + 1
        return seg.opcode == Opcode.WRITE_MIDDLE and doomed.get(seg.psn) == seen[seg.psn]

    a.out.drop_if = drop
    data = rng.randbytes(100 * 256)
    sink = bytearray(len(data))
    mr = b.memory.register(sink)
    a.qp.post_write(1, data, mr.va, mr.rkey)
    run(a, b, done_when(a, b, 1))
    assert sink == data and a.out.dropped == 2
    assert b.qp.counters.naks_tx == 2 and a.qp.counters.naks_rx == 2
    assert b.qp.counters.out_of_sequence > 90
    assert a.qp.counters.timeouts == 0


def test_timeout_backs_off_then_fails_the_qp() -> None:
    qp = QueuePair(QpConfig(qpn=1, remote_qpn=2, rto=0.1, rto_max=0.5, retry_limit=4),
                   MemoryTable())
    qp.post_write(1, b"a" * 100, 0x1000, 7)
    qp.post_write(2, b"b" * 100, 0x2000, 7)
    now, deadlines = 0.0, []
    assert len(qp.poll(now)) == 2
    while qp.state is QpState.READY:
        now = qp.next_deadline()
        deadlines.append(round(now, 3))
        qp.poll(now)
    assert deadlines == [0.1, 0.3, 0.7, 1.2, 1.7]  # 0.1, then x2 capped at 0.5
    assert qp.counters.timeouts == 5 and qp.counters.retransmitted_packets == 8
    assert [(c.wr_id, c.status) for c in qp.completions()] == [
        (1, WcStatus.RETRY_EXCEEDED), (2, WcStatus.FLUSHED)]
    assert qp.next_deadline() is None and qp.poll(now + 10) == []
    with pytest.raises(QpStateError):
        qp.post_send(3, b"late")


def test_progress_resets_the_timeout() -> None:
    qp = QueuePair(QpConfig(qpn=1, remote_qpn=2, mtu=256, rto=0.1), MemoryTable())
    qp.post_write(1, bytes(1024), 0x1000, 7)
    qp.poll(0.0)
    qp.poll(0.1)  # one timeout: rto doubles to 0.2
    assert qp.next_deadline() == pytest.approx(0.3)
    qp.receive(Segment(Opcode.ACK, 1, 1, syndrome=Syndrome.ACK, msn=0), 0.15)
    assert qp.next_deadline() == pytest.approx(0.25)  # back to 0.1 after progress


def _responder(region_len: int = 4096) -> tuple[QueuePair, bytearray, int, int]:
    memory = MemoryTable()
    region = bytearray(region_len)
    mr = memory.register(region, Access.REMOTE_WRITE)
    return QueuePair(QpConfig(qpn=2, remote_qpn=1), memory), region, mr.va, mr.rkey


@pytest.mark.parametrize("va_offset,key_delta", [(4096 - 8, 0), (-1, 0), (0, 1)],
                         ids=["past-end", "before-start", "bad-rkey"])
def test_bad_reth_is_refused_and_counted(va_offset: int, key_delta: int) -> None:
    qp, region, va, rkey = _responder()
    seg = Segment(Opcode.WRITE_ONLY, 2, 0, True, va + va_offset, rkey + key_delta, 16,
                  payload=b"x" * 16)
    qp.receive(seg, 0.0)
    (nak,) = qp.poll(0.0)
    assert (nak.opcode, nak.syndrome, nak.psn) == (Opcode.ACK,
                                                    Syndrome.NAK_REMOTE_ACCESS_ERROR, 0)
    assert qp.counters.access_errors == 1 and qp.counters.rx_packets == 0
    assert region == bytearray(4096) and qp.responder.epsn == 0
    good = seg._replace(va=va, rkey=rkey)  # the same PSN, now valid, is accepted
    qp.receive(good, 0.0)
    assert region[:16] == b"x" * 16


def test_write_without_remote_write_access_is_refused() -> None:
    memory = MemoryTable()
    mr = memory.register(bytearray(64), Access.REMOTE_READ)
    qp = QueuePair(QpConfig(qpn=2, remote_qpn=1), memory)
    qp.receive(Segment(Opcode.WRITE_ONLY, 2, 0, True, mr.va, mr.rkey, 4, payload=b"abcd"), 0)
    assert qp.counters.access_errors == 1


def test_requester_fails_on_remote_access_error() -> None:
    rng = random.Random(4)
    a, b = make_pair(rng)
    mr = b.memory.register(bytearray(100))
    a.qp.post_write(1, b"y" * 200, mr.va, mr.rkey)  # longer than the region
    a.qp.post_write(2, b"z", mr.va, mr.rkey)
    run(a, b, done_when(a, b, 2))
    assert [c.status for c in a.done] == [WcStatus.REMOTE_ACCESS_ERROR, WcStatus.FLUSHED]
    assert a.qp.state is QpState.ERROR and b.qp.counters.access_errors == 1


def test_duplicates_are_dropped_and_reacked() -> None:
    qp, region, va, rkey = _responder()
    seg = Segment(Opcode.WRITE_ONLY, 2, 0, True, va, rkey, 4, payload=b"abcd")
    qp.receive(seg, 0.0)
    assert [s.psn for s in qp.poll(0.0)] == [0]
    region[:4] = b"...."
    qp.receive(seg, 0.0)
    (ack,) = qp.poll(0.0)
    assert (ack.syndrome, ack.psn) == (Syndrome.ACK, 0) and region[:4] == b"...."
    assert qp.counters.duplicates == 1


def test_acks_coalesce_every_n_packets() -> None:
    memory = MemoryTable()
    mr = memory.register(bytearray(16 * 256))
    qp = QueuePair(QpConfig(qpn=2, remote_qpn=1, mtu=256, ack_every=4), memory)
    acked = []
    for i in range(16):
        op = Opcode.WRITE_FIRST if i == 0 else Opcode.WRITE_MIDDLE
        op = Opcode.WRITE_LAST if i == 15 else op
        qp.receive(Segment(op, 2, i, i == 15, mr.va, mr.rkey, 16 * 256, payload=bytes(256)), 0)
        acked += [s.psn for s in qp.poll(0.0)]
    assert acked == [3, 7, 11, 15]


def test_read_survives_lost_responses() -> None:
    rng = random.Random(5)
    a, b = make_pair(rng, mtu=256, window=16)
    lost = {20, 21, 50}

    def drop_responses(seg: Segment) -> bool:
        if seg.opcode in (Opcode.READ_RESPONSE_MIDDLE, Opcode.READ_RESPONSE_LAST) \
                and seg.psn in lost:
            lost.discard(seg.psn)
            return True
        return False

    b.out.drop_if = drop_responses
    source = bytearray(rng.randbytes(80 * 256 - 100))
    mr = b.memory.register(source)
    dest = bytearray(len(source))
    a.qp.post_read(1, dest, mr.va, mr.rkey)
    run(a, b, done_when(a, b, 1))
    assert dest == source and a.done[0].status is WcStatus.SUCCESS
    assert a.qp.counters.implied_naks >= 2 and b.qp.counters.duplicates >= 2


def test_read_request_is_resent_after_timeout_and_reexecuted() -> None:
    rng = random.Random(6)
    a, b = make_pair(rng, mtu=256, rto=0.01)
    first = [True]

    def drop_first_request(seg: Segment) -> bool:
        if seg.opcode == Opcode.READ_REQUEST and first[0]:
            first[0] = False
            return True
        return False

    a.out.drop_if = drop_first_request
    source = bytearray(rng.randbytes(1000))
    mr = b.memory.register(source)
    dest = bytearray(1000)
    a.qp.post_read(1, dest, mr.va, mr.rkey)
    run(a, b, done_when(a, b, 1))
    assert dest == source and a.qp.counters.timeouts == 1


def test_ce_marks_trigger_rate_limited_cnps() -> None:
    qp, _, va, rkey = _responder()
    for i, now in enumerate((0.0, 10e-6, 60e-6)):
        qp.receive(Segment(Opcode.WRITE_ONLY, 2, i, False, va, rkey, 4, payload=b"abcd",
                           ecn=Ecn.CE), now)
        qp.poll(now)
    assert qp.counters.cnps_tx == 2  # 10 us after the first is inside the 50 us interval
    qp.receive(Segment(Opcode.CNP, 2, 0, becn=True), 1.0)
    assert qp.counters.cnps_rx == 1


def test_send_larger_than_max_send_is_refused_locally() -> None:
    qp = QueuePair(QpConfig(qpn=1, remote_qpn=2, max_send=100), MemoryTable())
    with pytest.raises(AccessError):
        qp.post_send(1, bytes(101))


def test_memory_table_resolves_only_inside_regions() -> None:
    memory = MemoryTable()
    first, second = memory.register(bytearray(100)), memory.register(bytearray(5000))
    assert first.rkey != second.rkey and second.va >= first.va + 100
    assert memory.resolve(first.rkey, first.va, 100, Access.REMOTE_READ) is not None
    assert memory.resolve(first.rkey, first.va + 1, 100, Access.REMOTE_READ) is None
    assert memory.resolve(second.rkey, first.va, 10, Access.REMOTE_READ) is None
    memory.deregister(first)
    assert memory.resolve(first.rkey, first.va, 1, Access.REMOTE_READ) is None
    with pytest.raises(AccessError):
        memory.register(b"read-only", Access.REMOTE_WRITE)


def test_posting_more_than_the_psn_space_allows_is_refused() -> None:
    qp = QueuePair(QpConfig(qpn=1, remote_qpn=2, mtu=256), MemoryTable())
    huge = mmap.mmap(-1, 256 * (MAX_QUEUED_PSNS - 1))  # 1 GiB, never touched
    qp.post_read(1, huge, 0x1000, 7)
    qp.post_send(2, b"fits")
    with pytest.raises(EngineError, match="queued"):
        qp.post_send(3, b"one too many")
