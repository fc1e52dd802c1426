"""Outstanding READs (ORD/IRD) and RNR NAKs, as rxe has them.

Found against a real rxe: with no ORD, 1000-byte READs under loss made the
requester retry a READ that rxe had already forgotten (its IRD ring of 128
had moved on), and the QP died; RNR NAKs were ignored until the timeout.
"""

from __future__ import annotations

import random

import pytest
from roce_sim import make_pair, run

from emulator.roce.fastpath import Segment
from emulator.roce.headers import Opcode
from emulator.roce.verbs import RNR_TIMER_S, WcStatus, WrKind

# every test on both data paths: the Python codec, and runs through the compiled one
pytestmark = pytest.mark.usefixtures("data_path")

READ_ENDS = (Opcode.READ_RESPONSE_ONLY, Opcode.READ_RESPONSE_LAST)


def _reads(n: int, size: int, seed: int = 3, **cfg: object):
    rng = random.Random(seed)
    a, b = make_pair(rng, window=512, **cfg)
    source = bytearray(rng.randbytes(n * size))
    mr = b.memory.register(source)
    dest = bytearray(len(source))
    for i in range(n):
        a.qp.post_read(i, memoryview(dest)[i * size:(i + 1) * size], mr.va + i * size, mr.rkey)
    return a, b, source, dest


def _most_reads_in_flight(max_rd_atomic: int) -> int:
    """400 one-packet READs; the most READ REQUESTs ever sent and not yet answered."""
    a, b, source, dest = _reads(400, 1000, max_rd_atomic=max_rd_atomic)
    in_flight: set[int] = set()
    most = 0

    def request(seg: Segment) -> bool:
        nonlocal most
        if seg.opcode == Opcode.READ_REQUEST:
            in_flight.add(seg.psn)
            most = max(most, len(in_flight))
        return False

    def response(seg: Segment) -> bool:
        if seg.opcode in READ_ENDS:
            in_flight.discard(seg.psn)
        return False

    a.out.drop_if, b.out.drop_if = request, response
    run(a, b, lambda: len(a.done) == 400)
    assert dest == source and {c.status for c in a.done} == {WcStatus.SUCCESS}
    return most


def test_the_requester_keeps_at_most_ord_reads_outstanding() -> None:
    assert _most_reads_in_flight(16) == 16  # reached, never passed


def test_a_window_of_reads_is_not_limited_without_ord() -> None:
    """The control: the same READs at ORD 255 put far more than 16 in flight."""
    assert _most_reads_in_flight(255) > 64


def _lose_one_response(b, psn_index: int = 5):
    lost = [True]

    def drop(seg: Segment) -> bool:
        if seg.opcode in READ_ENDS and seg.psn == psn_index and lost[0]:
            lost[0] = False
            return True
        return False

    b.out.drop_if = drop


def test_an_ord_above_the_peers_ird_loses_a_retried_read_as_rxe_does() -> None:
    """ORD 64 against IRD 8: the retried READ is older than the responder's
    ring, is dropped unanswered, and the QP dies of retries."""
    a, b, _, _ = _reads(100, 1000, max_rd_atomic=64, max_dest_rd_atomic=8, rto=0.005,
                        rto_max=0.01, retry_limit=3)
    _lose_one_response(b)
    run(a, b, lambda: len(a.done) == 100)
    assert a.done[0].status is WcStatus.SUCCESS
    assert WcStatus.RETRY_EXCEEDED in {c.status for c in a.done}
    assert b.qp.counters.stale_read_requests >= 1


def test_an_ord_within_the_peers_ird_recovers_the_lost_read() -> None:
    a, b, source, dest = _reads(100, 1000, max_rd_atomic=8, max_dest_rd_atomic=8, rto=0.005,
                                rto_max=0.01, retry_limit=3)
    _lose_one_response(b)
    run(a, b, lambda: len(a.done) == 100)
    assert dest == source and {c.status for c in a.done} == {WcStatus.SUCCESS}
    assert b.qp.counters.stale_read_requests == 0 and b.qp.counters.duplicates >= 1


def test_reads_under_loss_complete_with_ord_within_ird() -> None:
    rng = random.Random(7)
    a, b = make_pair(rng, window=512, max_rd_atomic=128, max_dest_rd_atomic=128, rto=0.01)
    a.out.loss = b.out.loss = 0.02
    source = bytearray(rng.randbytes(600 * 1000))
    mr = b.memory.register(source)
    dest = bytearray(len(source))
    for i in range(600):
        a.qp.post_read(i, memoryview(dest)[i * 1000:(i + 1) * 1000], mr.va + i * 1000, mr.rkey)
    run(a, b, lambda: len(a.done) == 600, limit=600)
    assert dest == source and {c.status for c in a.done} == {WcStatus.SUCCESS}
    assert b.qp.counters.stale_read_requests == 0 and a.qp.counters.retransmitted_packets > 0


def test_rnr_nak_holds_the_send_for_the_rnr_timer_then_it_goes_through() -> None:
    rng = random.Random(4)
    a, b = make_pair(rng, min_rnr_timer=14)  # 1.28 ms
    b.qp.post_recv(0)  # counted receives, none posted yet
    a.qp.post_send(1, b"kv-ready")
    t = run(a, b, lambda: a.qp.counters.rnr_naks_rx >= 3)
    assert a.done == [] and b.done == []
    assert b.qp.counters.rnr_naks_tx == 3 and a.qp.counters.timeouts == 0
    assert t >= 2 * RNR_TIMER_S[14]  # two full waits between the three tries
    assert t < 0.1  # far sooner than the 100 ms retransmission timeout
    b.qp.post_recv(1)
    run(a, b, lambda: bool(a.done) and bool(b.done))
    assert [(c.kind, c.status) for c in a.done] == [(WrKind.SEND, WcStatus.SUCCESS)]
    assert [c.data for c in b.done] == [b"kv-ready"]
    assert a.qp.counters.timeouts == 0


def test_rnr_retry_exhausted_fails_the_send_and_flushes_the_rest() -> None:
    rng = random.Random(4)
    a, b = make_pair(rng, rnr_retry=2, min_rnr_timer=1)
    b.qp.post_recv(0)
    a.qp.post_send(1, b"one")
    a.qp.post_send(2, b"two")
    run(a, b, lambda: len(a.done) == 2)
    assert [(c.wr_id, c.status) for c in a.done] == [
        (1, WcStatus.RNR_RETRY_EXCEEDED), (2, WcStatus.FLUSHED)]
    assert a.qp.counters.rnr_naks_rx == 3 and b.done == []


def test_each_posted_receive_takes_one_send() -> None:
    rng = random.Random(4)
    a, b = make_pair(rng, min_rnr_timer=1)
    b.qp.post_recv(2)
    for i in range(3):
        a.qp.post_send(i, bytes([i]) * 3000)  # multi-packet SENDs
    run(a, b, lambda: len(a.done) == 2 and a.qp.counters.rnr_naks_rx > 0)
    assert len(b.done) == 2
    b.qp.post_recv(1)
    run(a, b, lambda: len(a.done) == 3)
    assert [c.data[:1] for c in b.done] == [b"\0", b"\1", b"\2"]
    assert {c.status for c in a.done} == {WcStatus.SUCCESS}
