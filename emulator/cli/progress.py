"""Progress output for long steps: a live spinner on a terminal, sparse lines elsewhere.

A progress message can be long (`fib: spine1 has 8 host prefixes without ...; spine2 ...
| bgp: ...`): without a terminal (CI logs, `make demo > log`) it is printed whole, wrapped
at its own separators (`; `, ` | `) and aligned under the first line; on a terminal the
spinner shows as much as fits the line, cut at a separator or a space, never mid-word.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.markup import escape

from ..progress import EVERY_ENV, Progress, Reporter, every_from

err_console = Console(stderr=True, highlight=False)
LINE_EVERY_S = 2.0  # without a terminal (CI logs), print at most one poll line this often
SEPARATORS = re.compile(r"(?<=; )|(?<= \| )")  # break after these first: they end one problem
LOG_COLUMNS = 120  # lines in a log are not re-wrapped by a terminal; $COLUMNS overrides


def wrap(msg: str, width: int) -> list[str]:
    """`msg` as lines of at most `width` columns: broken after `; ` or ` | ` where one fits,
    else at spaces; a single word longer than the line is left whole."""
    width = max(width, 20)
    lines, cur = [], ""
    for piece in SEPARATORS.split(msg):
        if cur and len(cur) + len(piece.rstrip(" |")) > width:
            lines.append(cur.removesuffix(" | ").rstrip())  # the next check starts the next line
            cur = ""
        cur += piece
    if cur.strip():
        lines.append(cur.removesuffix(" | ").rstrip())
    return [short for line in lines
            for short in (textwrap.wrap(line, width, break_long_words=False, break_on_hyphens=False)
                          or [line])]


def shorten(msg: str, width: int) -> str:
    """`msg` cut to `width` columns at a separator or a space, with `...` if anything was cut."""
    if len(msg) <= width:
        return msg
    head = wrap(msg, max(width - 4, 16))[0].rstrip(";|, ")
    return head[:max(width - 4, 16)] + " ..."


@contextmanager
def progress(title: str) -> Iterator[Callable[[str], None]]:
    start = time.monotonic()
    if err_console.is_terminal:
        with err_console.status(title) as status:
            def update(msg: str) -> None:
                stamp = f"{title} [{time.monotonic() - start:5.1f}s] "
                status.update(escape(stamp + shorten(msg, err_console.width - len(stamp) - 4)))
            yield update
        return
    last: dict[str, Any] = {"msg": "", "at": 0.0}

    def line(msg: str) -> None:
        now = time.monotonic()
        head = msg.split(":")[0]
        if head != last["msg"].split(":")[0] or now - last["at"] >= LINE_EVERY_S:
            stamp = f"[{now - start:5.1f}s] "
            lines = wrap(msg, (err_console.width if os.environ.get("COLUMNS") else LOG_COLUMNS) - len(stamp))
            text = "\n".join([stamp + lines[0]] + [" " * len(stamp) + rest for rest in lines[1:]])
            err_console.print(text, soft_wrap=True, markup=False)
            last.update(msg=msg, at=now)
    yield line


@contextmanager
def reporter(quiet: bool = False) -> Iterator[Progress]:
    """`up`'s and `down`'s progress on stderr (emulator.progress.Reporter: a status line on
    a terminal, a line every ROCELAB_PROGRESS_EVERY seconds elsewhere); `quiet`: none."""
    every = every_from(os.environ.get(EVERY_ENV))  # a bad value: exit 64 before anything
    if quiet:
        yield lambda _: None
        return
    out = Reporter(sys.stderr, every_s=every, width=shutil.get_terminal_size().columns)
    try:
        yield out
    finally:
        out.close()  # the status line cleared: the result (or the error) starts a clean line


@contextmanager
def byte_progress(title: str, total: int, quiet: bool = False) -> Iterator[Callable[..., None]]:
    """A bytes progress bar on stderr (silent with --json or without a terminal)."""
    if quiet or not err_console.is_terminal:
        yield lambda done, _total, *_: None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeElapsedColumn, TransferSpeedColumn

    with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), TimeElapsedColumn(), console=err_console) as bar:
        task = bar.add_task(title, total=total)
        yield lambda done, _total, *_: bar.update(task, completed=done)


def _interrupt(signum: int, frame: Any) -> None:
    """SIGINT/SIGTERM: raise KeyboardInterrupt, unless one (or the command's exit) is
    already being handled.

    The first signal unwinds the command (transactions roll back, labs come down); a
    second one landing while that runs (in an `except` or `finally` on the way, before
    the rollback holds signals, or while a worker pool is joined) would cut the rollback
    short: it is ignored there. Outside such a handler it interrupts again, so a first
    KeyboardInterrupt lost where Python swallows exceptions (a `__del__`) never leaves the
    command deaf to signals."""
    if isinstance(sys.exc_info()[1], (KeyboardInterrupt, SystemExit)):
        return  # 130 (or the command's own code) is on its way: a traceback would replace it
    raise KeyboardInterrupt


def interrupt_on_sigterm() -> None:
    """SIGTERM (a CI job's timeout, `kill`) unwinds a long command as Ctrl-C does, and
    neither interrupts the unwinding of an earlier one: see _interrupt."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupt)
