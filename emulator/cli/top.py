from __future__ import annotations

import contextlib
import os
import select
import sys
import termios
import time
import tty
from collections.abc import Iterator

import click
from rich.console import Console
from rich.live import Live

from .. import lab, state
from ..metrics import top
from ..metrics.scrape import Scrape, Scraper
from .names import LAB


@click.command("top")
@click.argument("name", required=False, type=LAB)
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds between refreshes.")
@click.option("--rows", default=10, show_default=True, type=click.IntRange(min=1), help="Ports to list.")
@click.option("--once", is_flag=True,
              help="Print one frame (two scrapes, --interval apart) and exit.")
def command(name: str | None, interval: float, rows: int, once: bool) -> None:
    """A live dashboard: hottest queues, marks, pauses, drops, BGP, transfers. `q` quits.

    Example: rocelab top clos-2x4
    """
    lab.require_root()
    plan = state.lab_plan(state.resolve_lab(name))
    scraper = Scraper(plan)
    console = Console()
    try:
        if once:
            first = scraper.scrape()
            time.sleep(interval)  # the sampling interval for rates, not a synchronisation
            console.print(top.render(top.view(plan, first, scraper.scrape(), rows)))
            return
        prev: Scrape | None = None
        with _keys() as key, Live(console=console, screen=True, auto_refresh=False) as live:
            while True:
                cur = scraper.scrape()
                live.update(top.render(top.view(plan, prev, cur, rows)), refresh=True)
                prev = cur
                if key(max(0.05, interval - cur.seconds)) in ("q", "Q"):
                    return
    finally:
        scraper.close()


@contextlib.contextmanager
def _keys() -> Iterator:
    """key(timeout) -> the key pressed within timeout, or None. Works over plain SSH."""
    if not sys.stdin.isatty():
        yield lambda timeout: time.sleep(timeout)  # piped: no keys, refresh on a timer
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)  # keys arrive one by one, without echo; Ctrl-C still works
    try:
        def key(timeout: float) -> str | None:
            ready, _, _ = select.select([fd], [], [], timeout)
            return os.read(fd, 1).decode(errors="ignore") if ready else None
        yield key
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
