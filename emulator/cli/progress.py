"""Progress output for long steps: a live spinner on a terminal, sparse lines elsewhere."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console

err_console = Console(stderr=True, highlight=False)
LINE_EVERY_S = 2.0  # without a terminal (CI logs), print at most one poll line this often


@contextmanager
def progress(title: str) -> Iterator[Callable[[str], None]]:
    start = time.monotonic()
    if err_console.is_terminal:
        with err_console.status(title) as status:
            def update(msg: str) -> None:
                status.update(f"{title} [{time.monotonic() - start:5.1f}s] {msg[:150]}")
            yield update
        return
    last = {"msg": "", "at": 0.0}

    def line(msg: str) -> None:
        now = time.monotonic()
        head = msg.split(":")[0]
        if head != last["msg"].split(":")[0] or now - last["at"] >= LINE_EVERY_S:
            err_console.print(f"[{now - start:5.1f}s] {msg[:200]}", soft_wrap=True)
            last.update(msg=msg, at=now)
    yield line


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
