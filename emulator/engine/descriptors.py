"""How serving stacks post a KV transfer: descriptor-sized RDMA ops, rail striping.

A NIXL agent (vLLM's and Dynamo's KV connector) does not move a request's cache
as one big message: it builds a list of descriptors -- one (address, length)
per block per layer, a few KiB to tens of KiB each -- and posts them onto its
QPs in batches, the transfer completing when every descriptor has completed.
`cut` turns a transfer's segments into that list (`Job.descriptor`: the largest
op); `Feeder` posts it `BATCH` descriptors at a time while no QP has more than
`SQ_DEPTH` work requests outstanding, as a send queue of that depth would.

Mooncake's transfer engine stripes a transfer across a multi-NIC host's rails:
64 KiB slices (`STRIPE_SLICE`), slice j on rail j mod NICs, 2 QPs per NIC pair
(`QPS_PER_NIC`) taken in turn (`Job.stripe`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .kv import Segment

STRIPE_SLICE = 64 << 10  # Mooncake's slice: a striped transfer's unit per rail
QPS_PER_NIC = 2  # Mooncake's QPs per endpoint (per NIC pair)
SQ_DEPTH = 128  # work requests a QP holds outstanding before the feeder waits
BATCH = 32  # descriptors posted at once (one doorbell's worth)
MIN_DESCRIPTOR = 1 << 10
MAX_DESCRIPTORS = 1 << 20  # descriptors one transfer may post (each end lists them all)


def cut(segments: Sequence[Segment], piece: int) -> list[Segment]:
    """Every segment cut into ops of at most `piece` bytes, in order (0: as they are);
    each op moves a contiguous run of its segment to the same run on the other side."""
    if piece <= 0:
        return list(segments)
    out = []
    for s in segments:
        for off in range(0, s.length, piece):
            out.append(Segment(s.src_offset + off, s.dst_offset + off, min(piece, s.length - off)))
    return out


def qp_of(index: int, qps: int, rails: int, stripe: bool) -> int:
    """The QP (0-based) op `index` goes on. Unstriped: round-robin over the QPs. Striped
    (qps = QPS_PER_NIC x rails, QP i on rail i mod rails): slice j on rail j mod rails,
    alternating between that rail's QPs."""
    if not stripe or rails < 1:
        return index % qps
    rail, turn = index % rails, (index // rails) % max(1, qps // rails)
    return rail + rails * turn


def count(n_bytes: int, piece: int) -> int:
    """Ops a contiguous run of `n_bytes` becomes when cut into `piece`-byte ops."""
    return -(-n_bytes // piece)


Post = Callable[[int, int], None]  # (op index, QP index): post that op on that QP


@dataclass
class Feeder:
    """Posts a transfer's ops in batches as the QPs' send queues drain (data thread).
    `done()` gives how many ops have completed so far; `posted` counts what went out."""

    total: int
    qps: int
    post: Post
    where: Callable[[int], int]  # op index -> QP index
    done: Callable[[], int]
    depth: int = SQ_DEPTH
    batch: int = BATCH
    posted: int = 0

    @property
    def finished(self) -> bool:
        return self.posted >= self.total

    def tick(self, _now: float = 0.0) -> None:
        """Post whole batches while the outstanding ops leave room for one."""
        room = self.depth * self.qps
        while not self.finished:
            end = min(self.total, self.posted + self.batch)  # the last batch may be short
            if self.posted - self.done() + (end - self.posted) > room:
                break
            for i in range(self.posted, end):
                self.post(i, self.where(i))
            self.posted = end
