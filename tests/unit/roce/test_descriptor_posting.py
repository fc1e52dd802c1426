"""A KV transfer cut into NIXL-style descriptors and posted by descriptors.Feeder onto a real
RC queue pair over the simulated, lossy wire (roce_sim.py): every byte lands where the job
says, the send queue never holds more than its depth, and every op completes once."""

from __future__ import annotations

import random

import pytest
from roce_sim import make_pair, run

from emulator.engine.descriptors import SQ_DEPTH, Feeder
from emulator.engine.job import Job, Op, digest, source_bytes
from emulator.roce.verbs import WcStatus

KV = {"model": "llama3-8b", "tokens": 20, "seed": 7}  # 2 blocks (16 + 4 tokens) per tensor


@pytest.mark.parametrize("op", [Op.WRITE, Op.READ])
def test_descriptors_fed_in_batches_move_every_byte(op, data_path):
    job = Job(op, kv=KV, descriptor=4096)
    ops = job.segments()
    assert len(ops) == job.ops == 32 * 2 * (8 + 2)  # a full block is 8 ops, the 4-token one 2
    rng = random.Random(3)
    a, b = make_pair(rng, mtu=4096)  # a initiates: it pushes (WRITE) or pulls (READ)
    for link in (a.out, b.out):
        link.loss, link.reorder = 0.01, 0.02
    source, sink = source_bytes(job), bytearray(job.region_bytes)
    mine, theirs = (source, sink) if op is Op.WRITE else (sink, source)
    view, mr = memoryview(mine), b.memory.register(theirs)
    outstanding: list[int] = []

    def post(i: int, _qp: int) -> None:
        s = ops[i]
        if op is Op.WRITE:
            a.qp.post_write(i, view[s.src_offset:s.src_offset + s.length], mr.va + s.dst_offset, mr.rkey)
        else:
            a.qp.post_read(i, view[s.dst_offset:s.dst_offset + s.length], mr.va + s.src_offset, mr.rkey)
        outstanding.append(i + 1 - len(a.done))

    feeder = Feeder(len(ops), 1, post, lambda i: 0, lambda: len(a.done))

    def finished() -> bool:
        feeder.tick()
        return len(a.done) == len(ops)

    run(a, b, finished, limit=600)
    assert sorted(c.wr_id for c in a.done) == list(range(len(ops)))
    assert all(c.status is WcStatus.SUCCESS for c in a.done)
    assert max(outstanding) <= SQ_DEPTH  # the send queue's depth held
    assert a.out.dropped + b.out.dropped > 0  # the loss was real, and recovered from
    whole = Job(op, kv=KV).segments()  # the same bytes as one op per block copy
    assert digest(sink, ops, "dst") == digest(source, ops, "src") == digest(source, whole, "src")
