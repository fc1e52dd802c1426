"""Declarative header layouts: a header is a list of (name, bits) fields.

The readable codec describes every header (Ethernet, IPv4, UDP, BTH, RETH,
AETH) as a `Layout` so the wire format can be read off one table and checked
against the specification. It is deliberately simple and slow; the hot path
in `fastpath.py` uses hand-written `struct` formats and is tested against
these layouts.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from emulator.roce.errors import FieldOverflow, MalformedPacket


@dataclass(frozen=True)
class Field:
    """One header field, `bits` wide, most significant bit first.

    `to_int`/`from_int` convert a friendlier Python value (an address
    string, say) to and from the integer that is on the wire.
    """

    name: str
    bits: int
    to_int: Callable[[Any], int] = int
    from_int: Callable[[int], Any] = int


def ipv4_field(name: str) -> Field:
    """A 32-bit field holding a dotted-quad IPv4 address string."""
    return Field(name, 32, lambda v: int(ipaddress.IPv4Address(v)),
                 lambda i: str(ipaddress.IPv4Address(i)))


def mac_field(name: str) -> Field:
    """A 48-bit field holding a colon-separated MAC address string."""
    return Field(name, 48, lambda v: int(v.replace(":", ""), 16),
                 lambda i: ":".join(f"{b:02x}" for b in i.to_bytes(6, "big")))


class Layout:
    """An ordered list of fields whose widths add up to whole bytes."""

    def __init__(self, name: str, *fields: Field):
        total = sum(f.bits for f in fields)
        if total % 8:
            raise ValueError(f"{name}: fields add up to {total} bits, not whole bytes")
        self.name, self.fields, self.size = name, fields, total // 8

    def pack(self, values: dict[str, Any]) -> bytes:
        """Big-endian bytes of the fields; a value that does not fit raises."""
        acc = 0
        for f in self.fields:
            raw = f.to_int(values[f.name])
            if not 0 <= raw < 1 << f.bits:
                raise FieldOverflow(self.name, f.name, raw, f.bits)
            acc = acc << f.bits | raw
        return acc.to_bytes(self.size, "big")

    def unpack(self, data: bytes | memoryview) -> dict[str, Any]:
        """Field values of the first `size` bytes of `data`."""
        if len(data) < self.size:
            raise MalformedPacket(f"{self.name} needs {self.size} bytes, got {len(data)}")
        acc = int.from_bytes(data[: self.size], "big")
        out: dict[str, Any] = {}
        shift = self.size * 8
        for f in self.fields:
            shift -= f.bits
            out[f.name] = f.from_int(acc >> shift & ((1 << f.bits) - 1))
        return out


H = TypeVar("H", bound="Header")


class Header:
    """Mixin for frozen dataclasses whose wire form is `LAYOUT`."""

    LAYOUT: ClassVar[Layout]

    def to_bytes(self) -> bytes:
        return self.LAYOUT.pack(dataclasses.asdict(self))  # type: ignore[call-overload]

    @classmethod
    def from_bytes(cls: type[H], data: bytes | memoryview) -> H:
        return cls(**cls.LAYOUT.unpack(data))
