"""Output files a user names (`--out`, `-w`, `--junit`, `--evidence`, `-o`), written as root
without following a link someone else planted.

rocelab runs as root, and an output path usually sits in a directory others can write
(/tmp): a symlink planted at `out/results.json` would make a plain `open(path, "w")`
truncate whatever it points to. So:

- a directory is made fresh (0755) or accepted only if no symlink on its way and the
  directory itself belong to a user other than root, the caller or the user sudo ran as;
- a file is never opened by name through a link: `write_*` writes a new file beside it
  and renames it into place (a planted link is replaced, a reader never sees half a file);
  `open_fresh` (a stream, e.g. a pcap) removes what is at the name and creates it with
  O_EXCL | O_NOFOLLOW, relative to the directory's descriptor.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .errors import RocelabError

FILE_MODE = 0o644
DIR_MODE = 0o755


class OutputError(RocelabError):
    """An output path rocelab will not write: a link or directory of another user on its way."""


def trusted_uids() -> set[int]:
    """Owners whose links and directories an output may go through: root, us, sudo's caller."""
    uids = {0, os.geteuid()}
    sudo = os.environ.get("SUDO_UID", "")
    if sudo.isdigit():
        uids.add(int(sudo))
    return uids


def check_dir(path: str | Path) -> None:
    """Refuse `path` (a directory to write in, existing or not) if a symlink on its way, or
    the directory things would be created in, belongs to another user; or if that is a file."""
    p, trusted = Path(os.path.abspath(path)), trusted_uids()
    for part in (*reversed(p.parents), p):
        try:
            st = os.lstat(part)
        except (FileNotFoundError, NotADirectoryError):
            break
        if stat.S_ISLNK(st.st_mode) and st.st_uid not in trusted:
            raise OutputError(f"{path}: {part} is a symlink of uid {st.st_uid}: not following it")
    where = next(a for a in (p, *p.parents) if a.exists())
    st = os.stat(where)
    if not stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{path}: {where} is not a directory")
    if st.st_uid not in trusted:
        raise OutputError(f"{path}: {where} belongs to uid {st.st_uid}: not writing there as "
                          f"uid {os.geteuid()} (use a directory of your own)")


def make_dir(path: str | Path) -> Path:
    """`path` as a directory to write in: checked (check_dir), made if missing."""
    check_dir(path)
    Path(path).mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if Path(path).is_symlink() and os.lstat(path).st_uid not in trusted_uids():
        raise OutputError(f"{path}: became a symlink of another user: not following it")
    return Path(path)


@contextlib.contextmanager
def _dir_fd(path: Path) -> Iterator[int]:
    if path.name in ("", ".", "..") or path.is_dir():
        raise OutputError(f"{path}: is a directory, not a file to write")
    check_dir(path.parent)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _create(name: str, dir_fd: int) -> int:
    return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                   FILE_MODE, dir_fd=dir_fd)


def write_bytes(path: str | Path, data: bytes) -> Path:
    """`data` as the file `path`, through a new file renamed into place: a link there is
    replaced, never followed."""
    path = Path(path)
    with _dir_fd(path) as d:
        tmp = f".{path.name[:200]}.{secrets.token_hex(4)}.tmp"
        try:
            with os.fdopen(_create(tmp, d), "wb") as f:
                f.write(data)
            os.rename(tmp, path.name, src_dir_fd=d, dst_dir_fd=d)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=d)
            raise
    return path


def write_text(path: str | Path, text: str) -> Path:
    return write_bytes(path, text.encode())


def open_fresh(path: str | Path) -> BinaryIO:
    """`path` opened for writing as a new file: whatever was at the name (a planted link, a
    hard link, an old file) is removed first, never followed or truncated."""
    path = Path(path)
    with _dir_fd(path) as d:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path.name, dir_fd=d)
        return os.fdopen(_create(path.name, d), "wb")
