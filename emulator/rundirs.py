"""Who may enter a lab's run directory, and what rocelab may chmod.

    RUN_ROOT                 0755 if rocelab creates it; an existing one is never chmodded
                             (ROCELAB_RUN_ROOT=/tmp keeps its 1777), only checked: FRR
                             runs as user `frr` and must pass through it and its parents
    RUN_ROOT/LAB             0700 root, then 0710 root:frr once FRR runs there (frr may
                             pass through to its own dir, not list or read the rest)
    RUN_ROOT/LAB/ROUTER      0700 frr:frr (FRR writes its pid files and sockets there);
                             its config files 0640 frr:frr (snippets may hold BGP passwords)
    RUN_ROOT/LAB/HOST        0700 root (the engine's socket, its log, an rxe guest's files)
    state.json, sockets      0600 root (engine.sock, agentN.sock: bound under umask 077)
    logs, controller files   0600 root (the engine, controller, exporter and QEMU run
                             under umask 077; their logs are opened 0600 by rocelab)

Everything the lab puts there is only for root and, for its own directory, FRR.
"""

from __future__ import annotations

import grp
import os
import stat
from pathlib import Path
from typing import BinaryIO

from .errors import RealizeError

RUN_ROOT_MODE = 0o755
PRIVATE_DIR_MODE = 0o700
FRR_LAB_DIR_MODE = 0o710  # group frr: search only
FRR_FILE_MODE = 0o640
PRIVATE_UMASK = 0o177  # a socket or file made under it is 0600
HELPER_UMASK = 0o077  # procs.start's helpers (engine, controller, exporter, watchdog): files 0600, dirs 0700


def open_private(path: Path, append: bool = True) -> BinaryIO:
    """A log file of the lab's, 0600 whatever the umask (appended to, or truncated)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (
        os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab" if append else "wb")


def make_dirs(path: Path, mode: int) -> None:
    """Create `path` and any missing parents with exactly `mode` (whatever the umask);
    a directory that exists already is left as it is."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode)
        except FileExistsError:  # made meanwhile by another rocelab: not ours to chmod
            continue
        os.chmod(d, mode)  # mkdir's mode passes through the umask


def make_private_dir(path: Path, exist_ok: bool = False) -> None:
    """Create one directory 0700 (FileExistsError unless `exist_ok`; an existing one is
    made 0700 too: it is the lab's own)."""
    try:
        path.mkdir(PRIVATE_DIR_MODE)
    except FileExistsError:
        if not exist_ok:
            raise
    os.chmod(path, PRIVATE_DIR_MODE)


def share_with_frr(lab_dir: Path) -> None:
    """The lab's own dir: group frr may pass through it (0710 root:frr), nothing more;
    every parent must let others pass (it is not chmodded: RealizeError naming it)."""
    try:
        gid = grp.getgrnam("frr").gr_gid
    except KeyError:
        raise RealizeError("group 'frr' does not exist: is FRR installed? (make setup)") from None
    check_passable(lab_dir.parent)
    os.chown(lab_dir, 0, gid)
    os.chmod(lab_dir, FRR_LAB_DIR_MODE)


def check_passable(path: Path) -> None:
    """Every directory from / down to `path` lets any user through (o+x), as FRR needs."""
    for d in [path.resolve(), *path.resolve().parents]:
        mode = d.stat().st_mode
        if not mode & stat.S_IXOTH:
            raise RealizeError(f"{d} is mode {stat.S_IMODE(mode):04o}: FRR (user frr) cannot pass "
                               "through it to the lab's run dir; let others search it "
                               f"(chmod o+x {d}) or set ROCELAB_RUN_ROOT elsewhere")
