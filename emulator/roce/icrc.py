"""The RoCEv2 Invariant CRC over an IPv4 datagram (IBTA annex A17.3.3).

The ICRC covers everything a router may not change: it is the standard
CRC-32 (zlib's) of 8 bytes of 0xFF (standing in for the InfiniBand LRH),
then the IPv4 header with TOS, TTL and header checksum replaced by ones,
the UDP header with its checksum replaced by ones, the BTH with its
FECN/BECN/reserved byte replaced by ones, and the rest of the packet up to
the ICRC itself. Masking TOS is what lets a switch mark ECN CE without
breaking the packet. The 32-bit result goes on the wire least significant
byte first (checked against the rxe captures in tests/fixtures/rxe).

Only the first 40 bytes (IP + UDP + BTH) are copied and masked; the CRC then
continues over the rest of the datagram in place, so the payload is never
copied. The masked offsets, relative to the IPv4 header, are 1 (TOS), 8
(TTL), 10-11 (header checksum), 26-27 (UDP checksum) and 32 (BTH byte 4).
"""

from __future__ import annotations

import struct

from emulator.roce.errors import MalformedPacket

try:  # zlib-ng's CRC-32 (carry-less multiply) is ~4x faster than zlib 1.2's on 4 KiB
    from zlib_ng.zlib_ng import crc32
except ImportError:  # the same function, from the standard library
    from zlib import crc32

IPV4_HEADER = 20
UDP_HEADER = 8
BTH_SIZE = 12
ICRC_SIZE = 4
MASKED_SPAN = IPV4_HEADER + UDP_HEADER + BTH_SIZE  # bytes copied and masked
# The CRC of the 8-byte pseudo-LRH, used as the starting value so it never
# has to be prepended to anything.
PSEUDO_LRH_CRC = crc32(b"\xff" * 8)
_FF2 = b"\xff\xff"
_LE32 = struct.Struct("<I")  # the ICRC is sent least significant byte first


class IcrcScratch:
    """A reusable 40-byte buffer for the masked headers, so checking a
    datagram allocates nothing. Not thread-safe: one per thread.
    """

    def __init__(self) -> None:
        self._buf = bytearray(MASKED_SPAN)

    def icrc(self, datagram: bytes | bytearray | memoryview) -> int:
        """ICRC of a whole RoCEv2 IPv4 datagram; its last 4 bytes are ignored."""
        end = len(datagram) - ICRC_SIZE
        if end < MASKED_SPAN:
            raise MalformedPacket(f"datagram of {len(datagram)} bytes has no room for BTH+ICRC")
        buf = self._buf
        buf[:] = datagram[:MASKED_SPAN]
        buf[1] = 0xFF  # IPv4 TOS (DSCP + ECN)
        buf[8] = 0xFF  # IPv4 TTL
        buf[10:12] = _FF2  # IPv4 header checksum
        buf[26:28] = _FF2  # UDP checksum
        buf[32] = 0xFF  # BTH FECN, BECN, resv6
        crc = crc32(buf, PSEUDO_LRH_CRC)
        return crc32(memoryview(datagram)[MASKED_SPAN:end], crc)

    def check(self, datagram: bytes | bytearray | memoryview) -> bool:
        """True if the datagram's trailing ICRC matches its contents."""
        want = int.from_bytes(datagram[-ICRC_SIZE:], "little")
        return self.icrc(datagram) == want


def check_in_place(buf: bytearray, length: int) -> bool:
    """True if the ICRC of the datagram in `buf[:length]` is correct.

    The receive hot path: instead of copying the headers, it sets the
    masked fields to ones in `buf` itself, so those bytes (TOS, TTL, IPv4
    and UDP checksums, BTH byte 4) are lost: read them first. `length` must
    be at least MASKED_SPAN + ICRC_SIZE (`fastpath.parse` checks that).
    """
    end = length - ICRC_SIZE
    want = _LE32.unpack_from(buf, end)[0]
    buf[1] = buf[8] = buf[10] = buf[11] = buf[26] = buf[27] = buf[32] = 0xFF
    return crc32(memoryview(buf)[:end], PSEUDO_LRH_CRC) == want


def icrc(datagram: bytes | bytearray | memoryview) -> int:
    """ICRC of a whole RoCEv2 IPv4 datagram (IP header .. ICRC field).

    The trailing 4-byte ICRC field itself is not covered, so the same call
    serves the builder (which fills it afterwards) and the checker. Assumes
    a 20-byte IPv4 header: the decoders reject options before calling this.
    """
    return IcrcScratch().icrc(datagram)


def check_icrc(datagram: bytes | bytearray | memoryview) -> bool:
    """True if the trailing ICRC of an IPv4 RoCEv2 datagram is correct."""
    return IcrcScratch().check(datagram)
