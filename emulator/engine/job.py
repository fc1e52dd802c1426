"""What a transfer moves, as both engines compute it from the same small description.

A transfer is a list of segments (src offset, dst offset, length): one per
RDMA WRITE or READ message. Both ends derive the same list from the job
description, so only a few numbers cross the control channel; each end then
hashes *its* side of every segment in order, and equal hashes prove every
byte arrived where it belonged (the decode side's blocks are scattered).
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, TypedDict

from ..errors import RocelabError
from .descriptors import MAX_DESCRIPTORS, MIN_DESCRIPTOR, STRIPE_SLICE, count, cut
from .kv import KvLayout, Segment, model

# A transfer result's counters, summed over both ends' QPs (the engine's and kvpeer's)
SUM_KEYS = ("retransmitted_packets", "naks_rx", "naks_tx", "timeouts", "bad_icrc",
            "access_errors", "duplicates", "packets_sent", "cnps_rx", "cnps_tx")

MAX_MESSAGE = 1 << 20  # a contiguous transfer is posted as 1 MiB WRITE/READ messages
CONTROL_PORT = 18515  # perftest's default port, for the QPN/PSN/rkey/VA exchange
DEFAULT_MTU = 4096
ROCE_MTUS = (256, 512, 1024, 2048, 4096)  # the IB path MTUs
ROCE_DSCP = 26  # RoCE data on DSCP 26 / TC 3 by default
TRANSPORTS = ("rc", "mrc")
MAX_EVS = 1024


class QpResult(TypedDict, total=False):
    """One queue pair of a transfer: its numbers, the path it hashed onto, its counters
    (every key of `Counters` summed over both ends)."""

    qpn: int
    remote_qpn: int
    udp_sport: int
    spine: str | None  # the uplink the source leaf chose for this QP's five-tuple (None: evpn)
    rail: int | None  # a multi-NIC host's NIC this QP used (None: one NIC)
    retransmitted_packets: int
    timeouts: int
    cnps_rx: int


class TransferResult(TypedDict, total=False):
    """What one transfer returns (`rocelab transfer --json`, `engine.client.transfer`);
    documented key by key in docs/roce.md. Counters are summed over both ends."""

    op: str  # "write" | "read"
    src: str
    dst: str
    bytes: int
    duration_s: float  # data phase, wall
    setup_s: float  # QP exchange
    handoff_s: float  # setup + data
    goodput_gbps: float
    messages: int
    integrity_ok: bool  # both ends' sha256 of the payload agree
    digest: str
    interruption_s: float  # longest gap in in-order delivery on the receiving QPs
    retransmitted_packets: int
    naks_rx: int
    naks_tx: int
    timeouts: int
    bad_icrc: int
    access_errors: int
    duplicates: int
    packets_sent: int
    cnps_rx: int
    cnps_tx: int
    qps: list[QpResult]
    transport: str  # "rc" | "mrc"
    longest_interruption_s: float  # longest gap in placed-byte progress (wall s), RC and MRC
    failed: bool  # the transfer did not complete (MRC: a retry limit, the deadline)
    error: str | None
    mrc: dict[str, Any]  # MRC only: the connection's stats entry (docs/mrc.md), paths' spines


class Op(str, Enum):
    WRITE = "write"  # prefill pushes into decode's memory
    READ = "read"  # decode pulls from prefill's memory (as NIXL does)


@dataclass(frozen=True)
class Job:
    """A transfer: which bytes, how, over how many QPs. JSON-able both ways.

    How a serving stack moves KV (emulator/engine/descriptors.py, docs/roce.md):
    `op` READ is decode pulling (vLLM's NIXL connector), WRITE prefill pushing
    (SGLang, Mooncake, LMCache). `descriptor` (bytes; 0: off) cuts every message
    into RDMA ops of at most that size, posted in batches as a NIXL agent posts its
    descriptor list; the transfer completes when all have. `stripe` splits the
    transfer into 64 KiB slices over the initiator's NICs, slice j on rail j mod
    NICs, with 2 QPs per NIC (Mooncake's transfer engine): the engine sets `qps`
    to 2 x its NICs.
    """

    op: Op
    size: int = 0  # contiguous bytes (when kv is None)
    kv: dict[str, Any] | None = None  # {model, tokens, dtype, tokens_per_block, seed}
    qps: int = 1
    mtu: int = DEFAULT_MTU
    dscp: int = ROCE_DSCP
    seed: int = 1
    timeout_s: float = 600.0
    extra: dict[str, Any] = field(default_factory=dict)
    udp_sports: list[int] = field(default_factory=list)  # per QP; empty: derived from QPNs
    rate_bps: float = 0.0  # the flow's rate limit (wall bit/s, split over its QPs); 0: none
    ack_timeout_s: float = 0.0  # the QPs' first retransmission timeout (wall s); 0: engine's
    descriptor: int = 0  # largest RDMA op in bytes (NIXL-style descriptors); 0: whole messages
    stripe: bool = False  # 64 KiB slices over the NICs, 2 QPs per NIC (Mooncake)
    transport: str = "rc"  # rc: RoCEv2 RC QPs; mrc: one multipath connection (docs/mrc.md)
    evs: int = 64  # MRC: entropy values per plane

    def __post_init__(self) -> None:
        self._check_transport()
        if not 1 <= self.qps <= 64:
            raise RocelabError(f"--qps: must be 1..64 (got {self.qps})")
        if self.udp_sports and (len(self.udp_sports) != self.qps
                                or not all(1 <= s <= 65535 for s in self.udp_sports)):
            raise RocelabError(f"udp_sports: need {self.qps} ports in 1..65535 "
                               f"(got {self.udp_sports})")
        if self.ack_timeout_s < 0:
            raise RocelabError(f"ack_timeout: must be positive (got {self.ack_timeout_s})")
        if self.rate_bps < 0:
            raise RocelabError(f"--rate: must be positive (got {self.rate_bps})")
        if self.kv is None and self.size <= 0:
            raise RocelabError(f"--size: must be positive (got {self.size})")
        if self.mtu not in ROCE_MTUS:
            raise RocelabError(f"--mtu: must be one of {', '.join(map(str, ROCE_MTUS))} (got {self.mtu})")
        if self.payload_bytes > MAX_TRANSFER:
            what = "--tokens" if self.kv is not None else "--size"
            raise RocelabError(f"{what}: a transfer of {self.payload_bytes} bytes; at most "
                               f"{MAX_TRANSFER >> 30} GiB (both engines hold every byte in memory)")
        self._check_descriptor()

    def _check_descriptor(self) -> None:
        if self.descriptor and not MIN_DESCRIPTOR <= self.descriptor <= MAX_MESSAGE:
            raise RocelabError(f"--descriptor: must be {MIN_DESCRIPTOR} B..{MAX_MESSAGE >> 20} MiB "
                               f"(got {self.descriptor})")
        if self.transport == "mrc" and (self.descriptor or self.stripe):
            what = "--descriptor" if self.descriptor else "--stripe"
            raise RocelabError(f"{what}: RC only; an MRC connection sprays whole messages "
                               "over its EVs and planes itself")
        if self.ops > MAX_DESCRIPTORS:
            raise RocelabError(f"--descriptor: {self.ops} ops of {self.piece} B; at most "
                               f"{MAX_DESCRIPTORS} per transfer: raise --descriptor")

    @property
    def piece(self) -> int:
        """The largest op this job posts (0: its messages whole)."""
        pieces = [p for p in (self.descriptor, STRIPE_SLICE if self.stripe else 0) if p]
        return min(pieces, default=0)

    @property
    def ops(self) -> int:
        """RDMA ops (work requests) the transfer posts, without listing them."""
        layout, piece = self.layout(), self.piece
        if layout is None:
            return count(self.size, min(piece or MAX_MESSAGE, MAX_MESSAGE))
        full, last = divmod(layout.tokens, layout.tokens_per_block)
        per_token = layout.block_bytes // layout.tokens_per_block
        per_tensor = (full * count(layout.block_bytes, piece or layout.block_bytes)
                      + (count(last * per_token, piece or last * per_token) if last else 0))
        return layout.model.layers * 2 * per_tensor

    def _check_transport(self) -> None:
        if self.transport not in TRANSPORTS:
            raise RocelabError(f"--transport: must be one of {', '.join(TRANSPORTS)} "
                               f"(got {self.transport!r})")
        if not 1 <= self.evs <= MAX_EVS:
            raise RocelabError(f"--evs: must be 1..{MAX_EVS} (got {self.evs})")
        if self.transport == "mrc" and self.op is not Op.WRITE:
            raise RocelabError("--transport mrc: RDMA WRITE only (MRC has no READ): use --op write")

    def layout(self) -> KvLayout | None:
        if self.kv is None:
            return None
        k = self.kv
        return KvLayout(model(k["model"]), k["tokens"], k.get("dtype", "fp16"),
                        k.get("tokens_per_block", 16))

    @property
    def region_bytes(self) -> int:
        layout = self.layout()
        return layout.region_bytes if layout else self.size

    @property
    def payload_bytes(self) -> int:
        layout = self.layout()
        return layout.total_bytes if layout else self.size

    def segments(self) -> list[Segment]:
        """The RDMA ops in posting order: messages, cut to `piece` when set."""
        layout = self.layout()
        if layout:
            whole = layout.segments(self.kv.get("seed", self.seed))  # type: ignore[union-attr]
        else:
            whole = [Segment(off, off, min(MAX_MESSAGE, self.size - off))
                     for off in range(0, self.size, MAX_MESSAGE)]
        return cut(whole, self.piece)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["op"] = self.op.value
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Job:
        return cls(**(d | {"op": Op(d["op"])}))


def flow_of(job: Job, host: str, peer: str, initiator: bool) -> tuple[str, str, str]:
    """(flow name, src, dst) of the flow a transfer belongs to (telemetry's `flow` label):
    what the client put in `job.extra` (`flow`, `src`, `dst`), else "SRC->DST" from this
    host's name and the peer's address. src is where the data comes from."""
    holds_source = (job.op is Op.WRITE) == initiator
    src, dst = (host, peer) if holds_source else (peer, host)
    src, dst = str(job.extra.get("src") or src), str(job.extra.get("dst") or dst)
    return str(job.extra.get("flow") or f"{src}->{dst}"), src, dst


MAX_TRANSFER = 4 << 30  # bytes one transfer may move: each end holds them all in memory
SOURCE_CHUNK = 64 << 20  # randbytes(n) builds an n*8-bit int: 256 MiB and up overflow
# An engine keeps the source regions it generated, up to SOURCE_CACHE_MAX bytes in all
# (least recently used out first), and the digest of each segment list sent from them:
# generating 12 MiB took 0.1-0.35 s of every handoff on a loaded 2-core machine and its
# sha256 another 0.02-0.05 s, fixed costs of the test data, not of either transport
# (docs/mrc.md "Collisions"). A real KV cache is in memory before its handoff starts.
SOURCE_CACHE_MAX = 64 << 20
_sources: OrderedDict[tuple[int, int, int], bytes] = OrderedDict()
_digests: dict[tuple[tuple[int, int, int], tuple[tuple[int, int], ...]], str] = {}
_source_lock = threading.Lock()


def _source_key(job: Job) -> tuple[int, int, int]:
    return job.seed, job.region_bytes, SOURCE_CHUNK


def source_bytes(job: Job) -> bytearray:
    """The prefill side's region: seeded random bytes, so runs are reproducible. A fresh
    buffer every call: a cached region is copied, not generated again."""
    key = _source_key(job)
    with _source_lock:
        kept = _sources.get(key)
        if kept is not None:
            _sources.move_to_end(key)
    if kept is not None:
        return bytearray(kept)
    rng, size = random.Random(job.seed), job.region_bytes
    buf = bytearray(size)
    for off in range(0, size, SOURCE_CHUNK):
        n = min(SOURCE_CHUNK, size - off)
        buf[off:off + n] = rng.randbytes(n)
    if size <= SOURCE_CACHE_MAX:
        _keep(key, bytes(buf))
    return buf


def _keep(key: tuple[int, int, int], region: bytes) -> None:
    with _source_lock:
        _sources[key] = region
        while sum(len(v) for v in _sources.values()) > SOURCE_CACHE_MAX:
            gone, _ = _sources.popitem(last=False)
            for k in [k for k in _digests if k[0] == gone]:
                del _digests[k]


def source_digest(job: Job, region: memoryview | bytearray, segments: list[Segment]) -> str:
    """`digest(region, segments, "src")` of a region `source_bytes(job)` returned (and
    nothing wrote to): computed once per cached region and segment list."""
    key = (_source_key(job), tuple((s.src_offset, s.length) for s in segments))
    with _source_lock:
        known = _digests.get(key) if key[0] in _sources else None
    if known is None:
        known = digest(region, segments, "src")
        with _source_lock:
            if key[0] in _sources:
                _digests[key] = known
    return known


def prepare_source(job: Job) -> bool:
    """Generate and cache the source region of `job` (and its digest) ahead of its
    transfers; False when the region is too large to keep (nothing done)."""
    if job.region_bytes > SOURCE_CACHE_MAX:
        return False
    source_digest(job, source_bytes(job), job.segments())
    return True


def digest(region: memoryview | bytearray, segments: list[Segment], side: str) -> str:
    """sha256 over every segment's bytes in order, read at the `side` ('src'/'dst') offsets."""
    h = hashlib.sha256()
    view = memoryview(region)
    for s in segments:
        off = s.src_offset if side == "src" else s.dst_offset
        h.update(view[off:off + s.length])
    return h.hexdigest()
