"""The newc ("070701") cpio format the kernel unpacks an initramfs from. Pure.

Each entry: a 110-byte ASCII header (magic + 13 eight-digit hex fields), the
NUL-terminated name padded to 4 bytes, the data padded to 4 bytes; the archive
ends with an entry named TRAILER!!!.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass

MAGIC = b"070701"
TRAILER = "TRAILER!!!"


@dataclass(frozen=True)
class Entry:
    name: str  # relative, no leading slash
    mode: int  # file type bits | permissions
    data: bytes = b""
    rdev: tuple[int, int] = (0, 0)

    @classmethod
    def dir(cls, name: str, perm: int = 0o755) -> Entry:
        return cls(name, stat.S_IFDIR | perm)

    @classmethod
    def file(cls, name: str, data: bytes, perm: int = 0o644) -> Entry:
        return cls(name, stat.S_IFREG | perm, data)

    @classmethod
    def symlink(cls, name: str, target: str) -> Entry:
        return cls(name, stat.S_IFLNK | 0o777, target.encode())

    @classmethod
    def char(cls, name: str, major: int, minor: int, perm: int = 0o600) -> Entry:
        return cls(name, stat.S_IFCHR | perm, rdev=(major, minor))


def _pad(n: int) -> bytes:
    return b"\0" * (-n % 4)


def header(ino: int, entry: Entry) -> bytes:
    name = entry.name.encode() + b"\0"
    nlink = 2 if stat.S_ISDIR(entry.mode) else 1
    fields = (ino, entry.mode, 0, 0, nlink, 0, len(entry.data), 0, 0,
              entry.rdev[0], entry.rdev[1], len(name), 0)
    head = MAGIC + b"".join(b"%08x" % f for f in fields)
    return head + name + _pad(len(head) + len(name))


def archive(entries: list[Entry]) -> bytes:
    """The whole archive, entries in the order given (parents before children)."""
    out = bytearray()
    for ino, entry in enumerate([*entries, Entry(TRAILER, 0)], start=1):
        out += header(ino if entry.name != TRAILER else 0, entry)
        out += entry.data + _pad(len(entry.data))
    return bytes(out)


def parse(data: bytes) -> list[Entry]:
    """Read an archive back (tests; and a check of what was written)."""
    entries: list[Entry] = []
    pos = 0
    while True:
        if data[pos:pos + 6] != MAGIC:
            raise ValueError(f"bad cpio magic at offset {pos}")
        f = [int(data[pos + 6 + 8 * i: pos + 14 + 8 * i], 16) for i in range(13)]
        mode, size, namesize = f[1], f[6], f[11]
        name_at = pos + 110
        name = data[name_at:name_at + namesize - 1].decode()
        data_at = name_at + namesize + (-(110 + namesize) % 4)
        if name == TRAILER:
            return entries
        entries.append(Entry(name, mode, data[data_at:data_at + size], (f[9], f[10])))
        pos = data_at + size + (-size % 4)
