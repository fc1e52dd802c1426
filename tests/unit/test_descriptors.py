"""How a KV transfer is cut into NIXL-style descriptors, striped over rails, posted in batches."""

from __future__ import annotations

from collections import Counter

import pytest

from emulator.engine.descriptors import BATCH, STRIPE_SLICE, Feeder, cut, qp_of
from emulator.engine.job import Job, Op, digest, source_bytes
from emulator.engine.kv import Segment
from emulator.errors import RocelabError

KV_8B = {"model": "llama3-8b", "tokens": 1024}  # 128 KiB/token: 128 MiB, 32 KiB block copies


def test_16kib_descriptors_are_one_per_half_block_per_layer():
    job = Job(Op.READ, kv=KV_8B, descriptor=16 << 10)
    ops = job.segments()
    # 32 layers x K/V x 64 blocks of 32 KiB, each two 16 KiB descriptors
    assert len(ops) == job.ops == 32 * 2 * 64 * 2 == 8192
    assert {s.length for s in ops} == {16 << 10}
    assert sum(s.length for s in ops) == job.payload_bytes == 128 << 20


def test_a_descriptor_larger_than_a_block_leaves_one_op_per_block_per_layer():
    whole = Job(Op.WRITE, kv=KV_8B).segments()
    assert Job(Op.WRITE, kv=KV_8B, descriptor=64 << 10).segments() == whole
    assert len(whole) == 32 * 2 * 64


# Whole blocks and a part, cut evenly (16 KiB) and unevenly (3000 B): 100 and 33 tokens
# make the same cuts as the 1000 and 333 once here, in 32 and 10 MB source regions instead
# of 320 and 106 MB (13 s and 5.5 s under load)
@pytest.mark.parametrize("tokens,descriptor", [(100, 16 << 10), (17, 4096), (1, 1024), (33, 3000)])
def test_op_count_matches_the_list_and_the_bytes_are_the_same(tokens, descriptor):
    kv = {"model": "llama3-70b", "tokens": tokens, "seed": 5}
    plain, cut_job = Job(Op.WRITE, kv=kv), Job(Op.WRITE, kv=kv, descriptor=descriptor)
    ops = cut_job.segments()
    assert len(ops) == cut_job.ops and max(s.length for s in ops) <= descriptor
    region = source_bytes(plain)  # cutting changes the ops, never which bytes land where
    assert digest(region, ops, "src") == digest(region, plain.segments(), "src")
    assert digest(region, ops, "dst") == digest(region, plain.segments(), "dst")


def test_contiguous_transfers_cut_too():
    job = Job(Op.WRITE, size=(3 << 20) + 5, descriptor=1 << 20)
    assert [s.length for s in job.segments()] == [1 << 20] * 3 + [5]
    assert Job(Op.WRITE, size=1 << 20, descriptor=4096).ops == 256


def test_cut_keeps_each_piece_inside_its_segment():
    assert cut([Segment(0, 100, 10)], 4) == [Segment(0, 100, 4), Segment(4, 104, 4),
                                             Segment(8, 108, 2)]
    assert cut([Segment(0, 100, 10)], 0) == [Segment(0, 100, 10)]


@pytest.mark.parametrize("bad", [1, 1023, (1 << 20) + 1])
def test_descriptor_out_of_range_names_the_option(bad):
    with pytest.raises(RocelabError, match="--descriptor: must be 1024 B..1 MiB"):
        Job(Op.READ, kv=KV_8B, descriptor=bad)


def test_too_many_descriptors_is_refused_before_listing_them():
    with pytest.raises(RocelabError, match="--descriptor: .* at most 1048576 per transfer"):
        Job(Op.WRITE, size=2 << 30, descriptor=1024)


def test_stripe_slices_64kib_across_rails_two_qps_each():
    job = Job(Op.WRITE, size=4 << 20, stripe=True, qps=8)
    slices = job.segments()
    assert job.piece == STRIPE_SLICE and len(slices) == 64
    qps = [qp_of(i, 8, 4, True) for i in range(len(slices))]
    assert qps[:9] == [0, 1, 2, 3, 4, 5, 6, 7, 0]  # rail i mod 4, its two QPs in turn
    per_rail = Counter()
    for s, q in zip(slices, qps):
        per_rail[q % 4] += s.length
    assert per_rail == {r: 1 << 20 for r in range(4)}  # an equal share on every rail
    assert Counter(qps) == {q: 8 for q in range(8)}


def test_stripe_with_descriptors_uses_the_smaller_piece():
    assert Job(Op.READ, kv=KV_8B, descriptor=16 << 10, stripe=True).piece == 16 << 10
    assert Job(Op.READ, kv=KV_8B, descriptor=1 << 20, stripe=True).piece == STRIPE_SLICE


def test_unstriped_ops_go_round_robin():
    assert [qp_of(i, 3, 4, False) for i in range(5)] == [0, 1, 2, 0, 1]


def test_feeder_posts_in_batches_within_the_send_queue_depth():
    posted: list[tuple[int, int]] = []
    completed = [0]
    feeder = Feeder(1000, 2, lambda i, q: posted.append((i, q)), lambda i: i % 2,
                    lambda: completed[0], depth=64)
    feeder.tick()
    assert len(posted) == 4 * BATCH == 128  # 2 QPs x 64 deep, whole batches
    feeder.tick()
    assert len(posted) == 128  # nothing completed: nothing more
    completed[0] = 31
    feeder.tick()
    assert len(posted) == 128  # room for less than a batch
    completed[0] = 32
    feeder.tick()
    assert len(posted) == 160
    while not feeder.finished:
        completed[0] = len(posted)
        feeder.tick()
        assert len(posted) - completed[0] <= 128
    assert [i for i, _ in posted] == list(range(1000))
    assert Counter(q for _, q in posted) == {0: 500, 1: 500}


@pytest.mark.parametrize("total", [1, 8, BATCH - 1, BATCH + 1])
def test_feeder_posts_a_short_list_at_once(total):
    posted: list[int] = []
    feeder = Feeder(total, 1, lambda i, q: posted.append(i), lambda i: 0, lambda: 0, depth=total)
    feeder.tick()  # depth = the list (whole messages): everything goes out in the first tick
    assert posted == list(range(total)) and feeder.finished


def test_feeder_posts_the_short_last_batch_when_there_is_room_for_it():
    posted: list[int] = []
    feeder = Feeder(40, 1, lambda i, q: posted.append(i), lambda i: 0, lambda: max(0, len(posted) - 20),
                    depth=32)
    feeder.tick()
    assert len(posted) == 40  # 32, then (12 done, 20 outstanding) the last 8 fit


def test_job_round_trips_its_new_fields():
    job = Job(Op.READ, kv=KV_8B, descriptor=16 << 10, stripe=True)
    assert Job.from_json(job.to_json()) == job


def test_a_transfer_of_fewer_messages_than_a_batch_is_posted_whole():
    """Whole messages (depth = their count): 1 MiB or less is one message, fewer than
    BATCH; it must still go out (it once waited for room for a full batch forever)."""
    from emulator.engine.descriptors import Feeder

    posted = []
    for total in (1, 3, 33):
        posted.clear()
        f = Feeder(total, 1, lambda i, q: posted.append(i), lambda i: 0, lambda: 0, depth=total)
        f.tick()
        assert f.finished and posted == list(range(total))
