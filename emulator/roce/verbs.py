"""The vocabulary shared by the RC state machine: configuration, work
requests, completions and counters (the ibverbs concepts, in Python).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum

from emulator.roce.errors import QpConfigError
from emulator.roce.headers import Opcode

PATH_MTUS = (256, 512, 1024, 2048, 4096)
# Outstanding READs per QP as rxe has them (max_qp_rd_atom): the engine's ORD and IRD,
# kvpeer's, and the out_reads the perftest exchange offers.
MAX_RD_ATOMIC = 128


class WrKind(Enum):
    WRITE = "write"
    READ = "read"
    SEND = "send"
    RECV = "recv"  # a SEND that arrived, as seen by the receiving side


class WcStatus(Enum):
    SUCCESS = "success"
    REMOTE_ACCESS_ERROR = "remote access error"
    REMOTE_INVALID_REQUEST = "remote invalid request"
    REMOTE_OPERATIONAL_ERROR = "remote operational error"
    RETRY_EXCEEDED = "transport retry counter exceeded"
    RNR_RETRY_EXCEEDED = "RNR retry counter exceeded"
    FLUSHED = "flushed: QP in error state"


class QpState(Enum):
    READY = "ready"  # RTS: sending and receiving
    ERROR = "error"  # a fatal error; every later work request is flushed


@dataclass(frozen=True)
class QpConfig:
    """Everything both ends must agree on, plus local tuning.

    `send_psn` is the first PSN of this side's requests, `recv_psn` the PSN
    this side expects first from its peer (the peer's `send_psn`). Times are
    in the same unit as the `now` passed to the state machine (seconds).
    """

    qpn: int
    remote_qpn: int
    send_psn: int = 0
    recv_psn: int = 0
    mtu: int = 1024
    window: int = 128  # max request PSNs outstanding
    ack_every: int = 16  # responder ACKs at least every N in-order packets
    rto: float = 0.1  # first retransmission timeout
    rto_max: float = 2.0  # backoff doubles the timeout up to this
    retry_limit: int = 7  # timeouts in a row without progress before failing
    max_send: int = 65536  # largest SEND message accepted
    cnp_interval: float = 50e-6  # minimum gap between CNPs (notification point)
    udp_sport: int = 0  # 0: derived from the QPNs as rxe does; else fixed (a set flow label)
    # ORD (ibv_qp_attr.max_rd_atomic): READ REQUESTs this requester keeps outstanding at
    # most; the peer's IRD bounds it, so set it to min(own, peer's max_dest_rd_atomic).
    max_rd_atomic: int = MAX_RD_ATOMIC
    # IRD (max_dest_rd_atomic): READ REQUESTs this responder remembers, so a retried one
    # can be served again; older duplicates are dropped unanswered, as rxe does.
    max_dest_rd_atomic: int = MAX_RD_ATOMIC
    rnr_retry: int = 7  # RNR NAKs in a row without progress before failing; 7 means forever
    min_rnr_timer: int = 12  # the 5-bit RNR timer this responder puts in its RNR NAKs (0.64 ms)

    def __post_init__(self) -> None:
        if self.mtu not in PATH_MTUS:
            raise QpConfigError(f"path MTU {self.mtu} is not one of {PATH_MTUS}")
        if not 2 <= self.window < 1 << 22:
            raise QpConfigError(f"window {self.window} must be in [2, 2**22)")
        if not 1 <= self.max_rd_atomic <= 255 or not 1 <= self.max_dest_rd_atomic <= 255:
            raise QpConfigError(f"max_rd_atomic={self.max_rd_atomic} and max_dest_rd_atomic="
                                f"{self.max_dest_rd_atomic} must be in [1, 255]")
        if not 0 <= self.rnr_retry <= 7 or not 0 <= self.min_rnr_timer <= 31:
            raise QpConfigError(f"rnr_retry={self.rnr_retry} must be in [0, 7] and "
                                f"min_rnr_timer={self.min_rnr_timer} in [0, 31]")
        for name in ("qpn", "remote_qpn", "send_psn", "recv_psn"):
            if not 0 <= getattr(self, name) < 1 << 24:
                raise QpConfigError(f"{name}={getattr(self, name)} is not a 24-bit number")

    @property
    def read_chunk(self) -> int:
        """PSNs covered by one READ REQUEST: half a window, so reads pipeline."""
        return max(1, self.window // 2)


@dataclass(frozen=True)
class Completion:
    """One finished work request (or, for RECV, one arrived SEND message)."""

    wr_id: int
    kind: WrKind
    status: WcStatus
    byte_len: int
    data: bytes = b""


@dataclass
class QpCounters:
    """Per-QP counters; names become Prometheus `rocelab_qp_<name>_total`."""

    packets_sent: int = 0
    bytes_sent: int = 0  # payload bytes
    retransmitted_packets: int = 0
    rx_packets: int = 0  # accepted in order (requests and read responses)
    rx_bytes: int = 0  # payload bytes placed or delivered
    acks_tx: int = 0
    acks_rx: int = 0
    naks_tx: int = 0
    naks_rx: int = 0
    implied_naks: int = 0  # gaps the requester found in read responses or ACKs
    timeouts: int = 0
    duplicates: int = 0  # requests behind the expected PSN
    out_of_sequence: int = 0  # requests ahead of the expected PSN
    access_errors: int = 0  # bad rkey or access outside a region
    invalid_requests: int = 0
    unexpected_acks: int = 0  # ACK/NAK/response for nothing outstanding
    rnr_naks_tx: int = 0  # SENDs refused for want of a posted receive
    rnr_naks_rx: int = 0
    stale_read_requests: int = 0  # retried READs older than the IRD ring: dropped, as rxe does
    cnps_tx: int = 0
    cnps_rx: int = 0
    ce_rx: int = 0  # CE-marked packets that reached this QP (what the notification point saw)
    bad_icrc: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# Opcode of a packet by (kind, position): position is ONLY, FIRST, MIDDLE, LAST.
ONLY, FIRST, MIDDLE, LAST = range(4)
OPCODES: dict[WrKind, tuple[Opcode, Opcode, Opcode, Opcode]] = {
    WrKind.WRITE: (Opcode.WRITE_ONLY, Opcode.WRITE_FIRST, Opcode.WRITE_MIDDLE,
                   Opcode.WRITE_LAST),
    WrKind.SEND: (Opcode.SEND_ONLY, Opcode.SEND_FIRST, Opcode.SEND_MIDDLE, Opcode.SEND_LAST),
    WrKind.READ: (Opcode.READ_RESPONSE_ONLY, Opcode.READ_RESPONSE_FIRST,
                  Opcode.READ_RESPONSE_MIDDLE, Opcode.READ_RESPONSE_LAST),
}


def position(index: int, count: int) -> int:
    """ONLY/FIRST/MIDDLE/LAST for packet `index` of a `count`-packet message."""
    if count == 1:
        return ONLY
    if index == 0:
        return FIRST
    return LAST if index == count - 1 else MIDDLE


def packets_for(length: int, mtu: int) -> int:
    """Packets a message of `length` bytes needs (a zero-length one needs one)."""
    return max(1, -(-length // mtu))


# IBTA table 45: the RNR NAK timer field (5 bits) -> the wait, in seconds.
RNR_TIMER_S = (655.36e-3, 0.01e-3, 0.02e-3, 0.03e-3, 0.04e-3, 0.06e-3, 0.08e-3, 0.12e-3,
               0.16e-3, 0.24e-3, 0.32e-3, 0.48e-3, 0.64e-3, 0.96e-3, 1.28e-3, 1.92e-3,
               2.56e-3, 3.84e-3, 5.12e-3, 7.68e-3, 10.24e-3, 15.36e-3, 20.48e-3, 30.72e-3,
               40.96e-3, 61.44e-3, 81.92e-3, 122.88e-3, 163.84e-3, 245.76e-3, 327.68e-3,
               491.52e-3)
