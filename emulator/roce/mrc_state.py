"""An MRC sender's state records: its messages, its packets in flight, its counters and
configuration (mrc_sender.py drives them)."""

from __future__ import annotations

from dataclasses import dataclass

from emulator.roce.mrc_ev import Path

FOREVER = 25  # a retry limit of 25 means retry forever (MRC 1.0)


@dataclass(slots=True)
class SentMessage:
    number: int
    wr_id: int
    view: memoryview
    va: int
    rkey: int
    imm: int | None
    packets: int
    made: int = 0
    unacked: int = 0


@dataclass(slots=True)
class SentPacket:
    psn: int
    msg: SentMessage
    index: int
    length: int
    path: Path
    sent: float
    seq: int = 0  # its place in its EV's sending order
    retries: int = 0
    lost: bool = False
    resent: bool = False  # an acknowledgement may be of an earlier transmission
    acked: bool = False  # acknowledged: out of the sender's `_unacked` for good


@dataclass
class SenderCounters:
    packets_sent: int = 0
    bytes_sent: int = 0
    retransmitted_packets: int = 0
    retransmitted_bytes: int = 0
    sacks_received: int = 0
    nacks_received: int = 0
    trim_nacks_received: int = 0
    timeouts: int = 0
    losses: int = 0
    probes_sent: int = 0
    probes_answered: int = 0


@dataclass
class SenderConfig:
    mtu: int = 4096
    ack_timeout_s: float = 0.067  # 1.024 us x 2^t x dilation
    max_retries: int = FOREVER
    mpr_units: int = 64
    reorder: int = 0  # packets sent later on the same EV and acknowledged beyond which it is lost
    rate_bps: float = 0.0  # the connection's pacing rate (wall bit/s); 0: none
    ack_every: int = 16  # ACK_REQ on every this many packets (and a message's last)
