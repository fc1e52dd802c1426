"""Reading a file a user named, as root, without letting it make us read forever.

A topology or experiment path may name a FIFO (a read that waits for a writer), a
device (/dev/zero never ends; opening /dev/watchdog arms it) or a directory: the
path is stat'ed first and only a regular file is opened, then checked again on the
open descriptor (it may have been swapped), and at most `limit` + 1 bytes are read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class NotRegularError(ValueError):
    """The path is not a regular file (FIFO, device, socket, directory)."""


class TooLargeError(ValueError):
    """The file holds more than the limit."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _check(mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise NotRegularError(f"is {_kind(mode)}, not a regular file")


def read_bytes(path: str | Path, limit: int) -> bytes:
    """A regular file's bytes, at most `limit` of them (TooLargeError beyond: never more
    than limit + 1 bytes are read). OSError as open/read raise it."""
    _check(os.stat(path).st_mode)  # before open: opening some devices has effects
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        _check(st.st_mode)
        if st.st_size > limit:
            raise TooLargeError(f"is {st.st_size} bytes; at most {limit}")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:  # it grew after the stat
        raise TooLargeError(f"is more than {limit} bytes; at most {limit}")
    return b"".join(chunks)
