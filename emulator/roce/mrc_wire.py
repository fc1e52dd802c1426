"""rocelab MRC encoding v1: build and parse MRC datagrams (docs/mrc.md "Wire format").

An MRC datagram is RoCEv2 (IPv4 / UDP 4791 / BTH ... / ICRC) with a BTH opcode
from the manufacturer-specific range and a 16-byte MRC header (MRCH) right
after the BTH. Data packets carry a RETH with the packet's own address, so
they can be placed in any order. Offsets here are from the IPv4 header (what
the raw socket sends): BTH at 28, MRCH at 40, RETH or extension at 56.
"""

from __future__ import annotations

import struct
from enum import IntEnum, IntFlag
from typing import NamedTuple

from emulator.roce.errors import MalformedPacket
from emulator.roce.fastpath import unroll
from emulator.roce.headers import DEFAULT_PKEY, IPPROTO_UDP, ROCE_UDP_PORT
from emulator.roce.icrc import ICRC_SIZE, PSEUDO_LRH_CRC, crc32

VERSION = 1
MRCH_AT = 40  # MRCH offset in the IPv4 datagram (54 in the Ethernet frame)
EXT_AT = 56  # RETH or the SACK/NACK extension
DATA_HEADERS = 72  # IPv4 + UDP + BTH + MRCH + RETH: where a WRITE's payload starts
_HEAD = struct.Struct("!BBHHHBBH4s4sHHHHBBHIIBBHIII")  # IPv4, UDP, BTH, MRCH
_IP_FIX = struct.Struct("!BBHHHBBH")
_RETH = struct.Struct("!QII")
_SACK = struct.Struct("!QHHBBH")  # bitmap, packets, ce, echo flags, trigger PSN (24 bits)
_NACK = struct.Struct("!B3xI")
_U32 = struct.Struct("!I")
_ADDRS = struct.Struct("!4H")
_LE32 = struct.Struct("<I")
_PARSE = struct.Struct("!BBH2xH1xB2x4s4xHHH2xBB2xIIBBHIII")  # IPv4, UDP, BTH, MRCH


class MrcOpcode(IntEnum):
    WRITE = 0xE0
    WRITE_IMM = 0xE1
    SACK = 0xE2
    NACK = 0xE3
    PROBE = 0xE4
    PROBE_REPLY = 0xE5


class MrcFlag(IntFlag):
    TRIMMED = 0x1
    LASTHOP = 0x2
    ACK_REQ = 0x4


class NackCode(IntEnum):
    TRIMMED = 1
    TRIMMED_LASTHOP = 2
    MISSING = 3
    ACCESS = 4


# the same values as plain ints, for the per-packet paths (IntFlag arithmetic is slow)
OP_WRITE, OP_WRITE_IMM, OP_SACK, OP_NACK, OP_PROBE, OP_PROBE_REPLY = range(0xE0, 0xE6)
F_TRIMMED, F_LASTHOP, F_ACK_REQ = 1, 2, 4

EXT_LEN = {MrcOpcode.WRITE: 16, MrcOpcode.WRITE_IMM: 20, MrcOpcode.SACK: 16,
           MrcOpcode.NACK: 8, MrcOpcode.PROBE: 0, MrcOpcode.PROBE_REPLY: 0}
_EXT = {int(k): v for k, v in EXT_LEN.items()}
_DATA = (int(MrcOpcode.WRITE), int(MrcOpcode.WRITE_IMM))


class MrcPacket(NamedTuple):
    """One MRC packet's transport fields. `echo` and `ref` are the SACK's echo flags
    and trigger PSN, or the NACK's code and cumulative ack; `ecn`, `src_ip` and `sport`
    are filled by `parse` from the IP/UDP headers."""

    opcode: int
    conn: int  # BTH destination QP: the receiving end's connection id
    psn: int
    flags: int = 0
    plane: int = 0
    ev: int = 0
    msg: int = 0
    ts: int = 0
    ext: int = 0
    va: int = 0
    rkey: int = 0
    length: int = 0
    imm: int = 0
    payload: bytes | memoryview = b""
    bitmap: int = 0
    packets: int = 0
    ce: int = 0
    echo: int = 0
    ref: int = 0
    ecn: int = 0
    src_ip: int = 0

    @property
    def is_data(self) -> bool:
        return self.opcode in _DATA


class MrcRun(NamedTuple):
    """`packets` full-MTU MRC_WRITE packets of one message with consecutive PSNs from
    `psn`, each on its own EV: the burst form of that many MrcPackets, which the compiled
    data path (`_wire.mrc_add`) builds without a Python object per packet. Packet i
    carries payload[i * mtu:(i + 1) * mtu] at address va + i * mtu, leaves on
    `evs[i]` (plane << 16 | EV) and asks for a SACK (ACK_REQ) when its PSN is a multiple
    of `every`. `packets_()` is what it stands for (the reference)."""

    conn: int
    psn: int  # the first packet's PSN, unwrapped (the wire carries its low 24 bits)
    packets: int
    msg: int
    ts: int
    length: int  # the message's total length (MRCH extension)
    va: int
    rkey: int
    mtu: int
    every: int
    evs: list[int]
    payload: memoryview

    def packets_(self) -> list[MrcPacket]:
        out, mtu = [], self.mtu
        for i, pe in enumerate(self.evs):
            psn = self.psn + i
            out.append(MrcPacket(OP_WRITE, self.conn, psn & 0xFFFFFF,
                                 0 if psn % self.every else F_ACK_REQ, pe >> 16, pe & 0xFFFF,
                                 self.msg, self.ts, self.length, self.va + i * mtu, self.rkey,
                                 mtu, 0, self.payload[i * mtu:(i + 1) * mtu]))
        return out


def expand(items: list[MrcPacket | MrcRun]) -> list[MrcPacket]:
    """The MrcPackets a burst stands for, in order."""
    return unroll(items, MrcRun, MrcRun.packets_)


def build(p: MrcPacket, src: bytes, dst: bytes, tos: int, ip_id: int) -> bytearray:
    """The IPv4 datagram for `p` from `src` to `dst` (4-byte addresses), UDP source
    port = its EV, TTL 64, DF, with the ICRC."""
    buf = bytearray(max_datagram(len(p.payload)))
    del buf[build_into(p, src, dst, tos, ip_id, buf):]
    return buf


_SUMS: dict[bytes, int] = {}


def _addr_sum(src: bytes, dst: bytes) -> int:
    """The IPv4 checksum's constant words for (src, dst), computed once per pair."""
    key = src + dst
    s = _SUMS.get(key)
    if s is None:
        s = _SUMS[key] = 0x4500 + 0x4000 + (64 << 8 | IPPROTO_UDP) + sum(_ADDRS.unpack(key))
    return s


def max_datagram(payload: int) -> int:
    """The longest datagram a packet with `payload` bytes makes."""
    return EXT_AT + 20 + payload + 3 + ICRC_SIZE


def build_into(p: MrcPacket, src: bytes, dst: bytes, tos: int, ip_id: int,
               buf: bytearray | memoryview) -> int:
    """`build`, into the start of `buf` (at least `max_datagram` bytes); its length."""
    op, payload = p.opcode, p.payload
    n = len(payload) if op in _DATA else 0
    pad = -n & 3
    body = EXT_AT + _EXT[op]
    total = body + n + pad + ICRC_SIZE
    bth_w2 = (p.flags & F_ACK_REQ and 1 << 31) | p.psn & 0xFFFFFF
    _HEAD.pack_into(buf, 0, 0x45, 0xFF, total, ip_id, 0x4000, 0xFF, IPPROTO_UDP, 0xFFFF,
                    src, dst, p.ev, ROCE_UDP_PORT, total - 20, 0xFFFF, op, pad << 4,
                    DEFAULT_PKEY, 0xFF000000 | p.conn, bth_w2,
                    VERSION << 4 | p.flags & 0xF, p.plane, p.ev, p.msg & 0xFFFFFFFF,
                    p.ts & 0xFFFFFFFF, p.ext & 0xFFFFFFFF)
    _pack_ext(p, op, buf)
    if n:
        buf[body:body + n] = payload
    end = body + n + pad
    if pad:
        buf[body + n:end] = b"\0" * pad
    _LE32.pack_into(buf, end, crc32(memoryview(buf)[:end], PSEUDO_LRH_CRC))
    s = _addr_sum(src, dst) + tos + total + ip_id
    s = (s & 0xFFFF) + (s >> 16)
    _IP_FIX.pack_into(buf, 0, 0x45, tos, total, ip_id, 0x4000, 64, IPPROTO_UDP,
                      ~((s & 0xFFFF) + (s >> 16)) & 0xFFFF)
    buf[26] = buf[27] = buf[32] = 0
    return total


def _pack_ext(p: MrcPacket, op: int, buf: bytearray | memoryview) -> None:
    if op in _DATA:
        _RETH.pack_into(buf, EXT_AT, p.va, p.rkey, p.length)
        if op == OP_WRITE_IMM:
            _U32.pack_into(buf, EXT_AT + 16, p.imm)
    elif op == OP_SACK:
        _SACK.pack_into(buf, EXT_AT, p.bitmap, p.packets & 0xFFFF, p.ce & 0xFFFF,
                        p.echo & 0xFF, p.ref >> 16 & 0xFF, p.ref & 0xFFFF)
    elif op == OP_NACK:
        _NACK.pack_into(buf, EXT_AT, p.echo, p.ref & 0xFFFFFF)


def unwrap(psn24: int, base: int) -> int:
    """A 24-bit PSN from the wire as the full PSN nearest `base` (a cumulative ack)."""
    diff = (psn24 - base) & 0xFFFFFF
    return base + diff if diff < 1 << 23 else base + diff - (1 << 24)


def timestamp_us(now: float) -> int:
    """The MRCH timestamp of a moment (seconds): microseconds, wrapping at 2^32."""
    return int(now * 1e6) & 0xFFFFFFFF


def is_mrc(datagram: bytes | bytearray | memoryview) -> bool:
    """True if an IPv4 RoCEv2 datagram carries an MRC opcode."""
    return len(datagram) > 28 and datagram[28] in _EXT


def parse(datagram: bytearray | memoryview, check_icrc: bool = True,
          in_place: bool = False) -> MrcPacket:
    """Parse one MRC IPv4 datagram; the payload is a view into it. The ICRC is
    checked (MalformedPacket if wrong) unless the MRCH says TRIMMED: a trimmed
    packet's payload is gone and it carries none (`payload` is empty). `in_place`:
    the check overwrites the IPv4/UDP/BTH fields the ICRC masks (TOS, TTL, checksums)
    in `datagram` itself instead of copying them (a receive buffer, read first)."""
    n = len(datagram)
    if n < EXT_AT + ICRC_SIZE:
        raise MalformedPacket(f"{n} bytes is shorter than an MRC header")
    (vihl, tos, total, frag, proto, src, _sport, dport, ulen, op, bflags, conn, w2,
     vf, plane, ev, msg, ts, ext) = _PARSE.unpack_from(datagram)
    if vihl != 0x45 or proto != IPPROTO_UDP or frag & 0x3FFF or dport != ROCE_UDP_PORT:
        raise MalformedPacket("not an unfragmented IPv4/UDP 4791 datagram without options")
    if op not in _EXT or vf >> 4 != VERSION:
        raise MalformedPacket(f"not MRC v{VERSION}: opcode {op:#04x}, version {vf >> 4}")
    flags, body = vf & 0xF, EXT_AT + _EXT[op]
    trimmed = bool(flags & F_TRIMMED)
    if total != n or ulen != n - 20 or n < body + (0 if trimmed else ICRC_SIZE):
        raise MalformedPacket(f"MRC datagram of {n} bytes: lengths {total}/{ulen}")
    if check_icrc and not trimmed:
        end = n - ICRC_SIZE
        want = _LE32.unpack_from(datagram, end)[0]
        if in_place:  # the caller's receive buffer: mask the ICRC's variant fields there
            d = datagram
            d[1] = d[8] = d[10] = d[11] = d[26] = d[27] = d[32] = 0xFF
            crc = crc32(datagram[:end], PSEUDO_LRH_CRC)
        else:
            masked = bytearray(datagram[:MRCH_AT])
            masked[1] = masked[8] = masked[10] = masked[11] = masked[26] = masked[27] = 0xFF
            masked[32] = 0xFF
            crc = crc32(memoryview(datagram)[MRCH_AT:end], crc32(masked, PSEUDO_LRH_CRC))
        if crc != want:
            raise MalformedPacket("bad ICRC")
    base = (op, conn & 0xFFFFFF, w2 & 0xFFFFFF, flags, plane, ev, msg, ts, ext)
    tail = _extension(datagram, op, body, n - ICRC_SIZE - (bflags >> 4 & 3), trimmed)
    return tuple.__new__(MrcPacket, base + tail + (tos & 3, int.from_bytes(src, "big")))


def _extension(d: bytearray | memoryview, op: int, body: int, stop: int,
               trimmed: bool) -> tuple[int, int, int, int, bytes | memoryview, int, int, int, int, int]:
    """(va, rkey, length, imm, payload, bitmap, packets, ce, echo, ref) of a packet."""
    va = rkey = length = imm = bitmap = packets = ce = echo = ref = 0
    payload: bytes | memoryview = b""
    if op in _DATA:
        va, rkey, length = _RETH.unpack_from(d, EXT_AT)
        if op == OP_WRITE_IMM:
            imm = _U32.unpack_from(d, EXT_AT + 16)[0]
        if not trimmed:
            payload = memoryview(d)[body:stop]
    elif op == OP_SACK:
        bitmap, packets, ce, echo, hi, lo = _SACK.unpack_from(d, EXT_AT)
        ref = hi << 16 | lo
    elif op == OP_NACK:
        echo, ref = _NACK.unpack_from(d, EXT_AT)
    return va, rkey, length, imm, payload, bitmap, packets, ce, echo, ref
