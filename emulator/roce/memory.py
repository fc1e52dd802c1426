"""Memory regions: buffers a remote peer may READ or WRITE by (VA, rkey).

A region is a Python buffer (bytearray, mmap, writable memoryview) given a
virtual address range and keys, like ibv_reg_mr. The responder resolves an
incoming RETH through `MemoryTable.resolve`, which refuses a wrong rkey, a
missing access right or any byte outside the region; the caller turns the
refusal into a "remote access error" NAK.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Flag, auto

from emulator.roce.errors import AccessError

_PAGE = 4096
_VA_BASE = 0x7F00_0000_0000  # looks like a user-space address in captures


class Access(Flag):
    LOCAL_WRITE = auto()
    REMOTE_WRITE = auto()
    REMOTE_READ = auto()


@dataclass(frozen=True)
class MemoryRegion:
    """A registered buffer. `buf` is a flat byte view of the caller's memory."""

    va: int
    length: int
    lkey: int
    rkey: int
    access: Access
    buf: memoryview = field(repr=False, compare=False)

    def contains(self, va: int, length: int) -> bool:
        return self.va <= va and va + length <= self.va + self.length


@dataclass
class MemoryTable:
    """The regions of one protection domain (one host's engine).

    Keys are derived from a registration counter so runs are reproducible;
    the low byte varies with `key_seed` so two hosts do not hand out the same
    keys, which makes a misdirected access visible.
    """

    key_seed: int = 0x2A
    _regions: dict[int, MemoryRegion] = field(default_factory=dict)
    _next_va: int = _VA_BASE
    _count: int = 0

    def register(self, buf: bytearray | memoryview,
                 access: Access = Access.REMOTE_WRITE | Access.REMOTE_READ) -> MemoryRegion:
        """Register `buf` and return its (va, length, lkey, rkey)."""
        view = memoryview(buf).cast("B")
        if view.readonly and access & (Access.REMOTE_WRITE | Access.LOCAL_WRITE):
            raise AccessError("a read-only buffer cannot be registered for writing")
        self._count += 1
        key = (self._count << 8 | (self.key_seed + self._count) & 0xFF) & 0xFFFFFFFF
        mr = MemoryRegion(self._next_va, len(view), key, key, access, view)
        self._next_va += (len(view) + 2 * _PAGE - 1) // _PAGE * _PAGE
        self._regions[key] = mr
        return mr

    def deregister(self, mr: MemoryRegion) -> None:
        self._regions.pop(mr.rkey, None)

    def region(self, rkey: int) -> MemoryRegion | None:
        """The region of `rkey` (a caller that checks access and bounds itself, per packet)."""
        return self._regions.get(rkey)

    def resolve(self, rkey: int, va: int, length: int, need: Access) -> memoryview | None:
        """The bytes [va, va+length) of the region `rkey`, or None if refused."""
        mr = self._regions.get(rkey)
        if mr is None or need not in mr.access or not mr.contains(va, length):
            return None
        off = va - mr.va
        return mr.buf[off:off + length]
