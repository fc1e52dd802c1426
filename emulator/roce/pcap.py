"""A minimal classic-pcap reader and writer (no scapy at run time).

Enough for the engine's own captures and for known-answer fixtures:
little/big endian, microsecond/nanosecond timestamps, any link type (the
caller decides what the bytes are: 1 = Ethernet, 101 = raw IPv4).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from emulator.roce.errors import MalformedPacket


class LinkType(IntEnum):
    ETHERNET = 1
    RAW = 101


_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1e-6), b"\xa1\xb2\xc3\xd4": (">", 1e-6),
    b"\x4d\x3c\xb2\xa1": ("<", 1e-9), b"\xa1\xb2\x3c\x4d": (">", 1e-9),
}


@dataclass(frozen=True)
class Record:
    timestamp: float
    data: bytes
    linktype: int


def read_pcap(path: Path) -> Iterator[Record]:
    """Yield every record of a classic pcap file."""
    raw = Path(path).read_bytes()
    try:
        endian, unit = _MAGICS[raw[:4]]
    except KeyError:
        raise MalformedPacket(f"{path}: not a classic pcap file") from None
    linktype = struct.unpack_from(endian + "I", raw, 20)[0]
    record = struct.Struct(endian + "IIII")
    off = 24
    while off + record.size <= len(raw):
        sec, frac, caplen, _origlen = record.unpack_from(raw, off)
        off += record.size
        if off + caplen > len(raw):
            raise MalformedPacket(f"{path}: record truncated at byte {off}")
        yield Record(sec + frac * unit, raw[off:off + caplen], linktype)
        off += caplen


def write_pcap(path: Path, frames: Iterable[bytes], linktype: LinkType = LinkType.ETHERNET,
               start: float = 0.0, step: float = 1e-6) -> None:
    """Write frames as a microsecond pcap, timestamps `start + i*step`."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, int(linktype))]
    for i, frame in enumerate(frames):
        usec = round((start + i * step) * 1e6)
        out.append(struct.pack("<IIII", usec // 1_000_000, usec % 1_000_000,
                               len(frame), len(frame)))
        out.append(frame)
    Path(path).write_bytes(b"".join(out))
