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
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, TypedDict

from ..errors import RocelabError
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
    """A transfer: which bytes, how, over how many QPs. JSON-able both ways."""

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
        layout = self.layout()
        if layout:
            return layout.segments(self.kv.get("seed", self.seed))  # type: ignore[union-attr]
        return [Segment(off, off, min(MAX_MESSAGE, self.size - off))
                for off in range(0, self.size, MAX_MESSAGE)]

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


def source_bytes(job: Job) -> bytearray:
    """The prefill side's region: seeded random bytes, so runs are reproducible."""
    rng, size = random.Random(job.seed), job.region_bytes
    buf = bytearray(size)
    for off in range(0, size, SOURCE_CHUNK):
        n = min(SOURCE_CHUNK, size - off)
        buf[off:off + n] = rng.randbytes(n)
    return buf


def digest(region: memoryview | bytearray, segments: list[Segment], side: str) -> str:
    """sha256 over every segment's bytes in order, read at the `side` ('src'/'dst') offsets."""
    h = hashlib.sha256()
    view = memoryview(region)
    for s in segments:
        off = s.src_offset if side == "src" else s.dst_offset
        h.update(view[off:off + s.length])
    return h.hexdigest()
