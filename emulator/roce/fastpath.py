"""The per-packet codec: build and parse IPv4/UDP/RoCEv2 datagrams fast.

The engine sends IPv4 datagrams through a raw socket with IP_HDRINCL and
reads them back from one, so this module turns a `Segment` (the transport
fields of one packet) into a datagram and back with a handful of
`struct.pack_into`/`unpack_from` calls on preallocated buffers, `icrc.crc32`
for the ICRC, and no per-packet allocation beyond the `Segment` and a
memoryview or two; payloads are copied once, into the send buffer. The
readable reference is `codec.py`; tests check that both agree byte for byte.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, TypeVar

from emulator.roce.errors import MalformedPacket
from emulator.roce.headers import (
    DEFAULT_PKEY,
    EXT_LENGTH,
    IPPROTO_UDP,
    ROCE_UDP_PORT,
    Ecn,
    Opcode,
)
from emulator.roce.icrc import ICRC_SIZE, MASKED_SPAN, PSEUDO_LRH_CRC, crc32

MAX_PAYLOAD = 4096
_RETH_LEN, _AETH_LEN = 16, 4
# IPv4 (no options) + UDP + BTH, read in one call; fields parse ignores are skipped.
_HEAD = struct.Struct("!BBH2xH1xB2xI4x2xHH2xBB2xII")
_MASKED_HEAD = struct.Struct("!BBHHHBBH4s4sHHHHBBHII")  # IPv4 + UDP + BTH
_IP_FIX = struct.Struct("!BBHHHBBH")  # the first 12 bytes of the IPv4 header
_BTH = struct.Struct("!BBHII")
_RETH = struct.Struct("!QII")
_U32 = struct.Struct("!I")
_ICRC = struct.Struct("<I")
_ZEROS = bytes(16)
_CNP = int(Opcode.CNP)
_new_segment = tuple.__new__  # builds a Segment from a full tuple, skipping keyword handling


class Segment(NamedTuple):
    """The transport-layer content of one RoCEv2 packet.

    RETH fields (`va`, `rkey`, `dma_length`) are meaningful only for opcodes
    that carry a RETH, AETH fields (`syndrome`, `msn`) only for those with an
    AETH. `ecn` and `src_ip` are filled in by `parse` from the IP header and
    ignored by the builder. `payload` excludes pad bytes.
    """

    opcode: int
    dest_qp: int
    psn: int
    ackreq: bool = False
    va: int = 0
    rkey: int = 0
    dma_length: int = 0
    syndrome: int = 0
    msn: int = 0
    payload: bytes | memoryview = b""
    becn: bool = False
    ecn: int = 0
    src_ip: int = 0


class Run(NamedTuple):
    """`packets` full-MTU packets of one payload-only opcode (a WRITE, SEND or READ
    RESPONSE MIDDLE) with consecutive PSNs from `psn`: the burst form of that many
    Segments, which the compiled data path (wire.py) builds without a Python
    object per packet. Packet i carries payload[i * mtu:(i + 1) * mtu]; the one
    whose PSN is `fill` (-1: none) carries AckReq. `Run.segments()` is what it
    stands for."""

    opcode: int
    dest_qp: int
    psn: int
    packets: int
    fill: int
    mtu: int
    payload: memoryview

    def segments(self) -> list[Segment]:
        op, qpn, mtu, view = self.opcode, self.dest_qp, self.mtu, self.payload
        psns = [(self.psn + i) & 0xFFFFFF for i in range(self.packets)]
        return [Segment(op, qpn, p, p == self.fill, payload=view[i * mtu:(i + 1) * mtu])
                for i, p in enumerate(psns)]


P = TypeVar("P")


def unroll(items: Iterable[Any], run_type: type, parts: Callable[[Any], list[P]]) -> list[P]:
    """The packets a burst of packets and runs stands for, in order: each `run_type` item
    replaced by `parts(item)` (RC's Runs here, MRC's MrcRuns in mrc_wire)."""
    out: list[P] = []
    for item in items:
        if type(item) is run_type:
            out.extend(parts(item))
        else:
            out.append(item)
    return out


def expand(items: list[Segment | Run]) -> list[Segment]:
    """The Segments a burst stands for, in order."""
    return unroll(items, Run, Run.segments)


class FrameBuilder:
    """Builds datagrams of one flow (addresses and UDP port fixed) in place.

    The headers are first packed with the ICRC-masked fields already at all
    ones, so one CRC-32 call runs straight over the buffer (no copy), and
    then the masked fields get their real values. `build` returns a view of
    an internal buffer that the next call overwrites: send it first.
    """

    def __init__(self, src_ip: str, dst_ip: str, sport: int, *, ttl: int = 64,
                 pkey: int = DEFAULT_PKEY, max_payload: int = MAX_PAYLOAD):
        self.max_datagram = MASKED_SPAN + _RETH_LEN + max_payload + 3 + ICRC_SIZE
        self._buf = bytearray(self.max_datagram)
        self._view = memoryview(self._buf)
        self._pkey, self._ttl, self._sport = pkey, ttl, sport
        self._src, self._dst = socket.inet_aton(src_ip), socket.inet_aton(dst_ip)
        # Sum of the IP header words that never change, for the checksum.
        self._ip_sum = (0x4500 + 0x4000 + (ttl << 8 | IPPROTO_UDP)
                        + sum(struct.unpack("!4H", self._src + self._dst)))

    def fields(self) -> tuple[bytes, bytes, int, int, int]:
        """(source, destination, UDP source port, TTL, P_Key): what the compiled
        builder (wire.py) needs to make the same datagrams."""
        return self._src, self._dst, self._sport, self._ttl, self._pkey

    def build(self, seg: Segment, ip_id: int, tos: int = Ecn.ECT0) -> memoryview:
        """The datagram for `seg` with the given IP ident and TOS byte."""
        return self._view[:self.build_into(seg, ip_id, tos, self._buf)]

    def build_into(self, seg: Segment, ip_id: int, tos: int,
                   out: bytearray | memoryview) -> int:
        """Build the datagram for `seg` at the start of `out` (a writable byte
        buffer of at least `max_datagram` bytes); return its length."""
        opcode, payload = seg[0], seg[9]  # Segment.opcode, Segment.payload
        n = len(payload)
        pad = -n & 3
        start = MASKED_SPAN + EXT_LENGTH[opcode]
        end = start + n + pad
        total = end + ICRC_SIZE
        _MASKED_HEAD.pack_into(out, 0, 0x45, 0xFF, total, ip_id, 0x4000, 0xFF, IPPROTO_UDP,
                               0xFFFF, self._src, self._dst, self._sport, ROCE_UDP_PORT,
                               total - 20, 0xFFFF, opcode, pad << 4, self._pkey,
                               0xFF000000 | seg[1], seg[3] << 31 | seg[2])
        if start != MASKED_SPAN:
            self._pack_ext(seg, opcode, start, out)
        out[start:start + n] = payload
        if pad:
            out[start + n:end] = _ZEROS[:pad]
        _ICRC.pack_into(out, end, crc32(out[:end], PSEUDO_LRH_CRC))
        s = self._ip_sum + tos + total + ip_id
        s = (s & 0xFFFF) + (s >> 16)
        _IP_FIX.pack_into(out, 0, 0x45, tos, total, ip_id, 0x4000, self._ttl, IPPROTO_UDP,
                          ~((s & 0xFFFF) + (s >> 16)) & 0xFFFF)
        out[26] = out[27] = 0  # UDP checksum: none, as rxe sends
        out[32] = seg[10] << 6  # BECN
        return total

    def _pack_ext(self, seg: Segment, opcode: int, at: int, out: bytearray | memoryview) -> None:
        if at - MASKED_SPAN == _AETH_LEN:
            _U32.pack_into(out, MASKED_SPAN, seg.syndrome << 24 | seg.msn)
        elif opcode != _CNP:
            _RETH.pack_into(out, MASKED_SPAN, seg.va, seg.rkey, seg.dma_length)
        else:
            out[MASKED_SPAN:at] = _ZEROS


def parse(datagram: memoryview) -> Segment:
    """Parse an IPv4 datagram into a `Segment` without copying the payload.

    The payload is a view into `datagram`; copy or place it before the
    buffer is reused. Does not check the ICRC (see `IcrcScratch.check`).
    Raises `MalformedPacket` for anything that is not RoCEv2.
    """
    n = len(datagram)
    if n < MASKED_SPAN + ICRC_SIZE:
        raise MalformedPacket(f"{n} bytes is shorter than IPv4+UDP+BTH+ICRC")
    vihl, tos, total, frag, proto, src, dport, ulen, op, flags, w1, w2 = _HEAD.unpack_from(datagram)
    if vihl != 0x45 or proto != IPPROTO_UDP or frag & 0x3FFF or total != n:
        raise MalformedPacket("not an unfragmented IPv4/UDP datagram without options")
    if dport != ROCE_UDP_PORT or ulen != n - 20:
        raise MalformedPacket(f"UDP port {dport} length {ulen} in {n} bytes")
    ext = EXT_LENGTH.get(op)
    if ext is None:
        raise MalformedPacket(f"unsupported BTH opcode {op:#04x}")
    start = MASKED_SPAN + ext
    stop = n - ICRC_SIZE - (flags >> 4 & 3)
    if stop < start:
        raise MalformedPacket(f"{n}-byte datagram too short for opcode {op:#04x}")
    va = rkey = dlen = syn = msn = 0
    if ext == _RETH_LEN and op != _CNP:
        va, rkey, dlen = _RETH.unpack_from(datagram, MASKED_SPAN)
    elif ext == _AETH_LEN:
        aeth = _U32.unpack_from(datagram, MASKED_SPAN)[0]
        syn, msn = aeth >> 24, aeth & 0xFFFFFF
    return _new_segment(Segment, (op, w1 & 0xFFFFFF, w2 & 0xFFFFFF, w2 >> 31 == 1, va, rkey,
                                  dlen, syn, msn, datagram[start:stop], w1 >> 30 & 1 == 1,
                                  tos & 3, src))
