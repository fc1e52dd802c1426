"""Progress of long work: counted phases with a rate and an ETA, on a terminal or in a log.

Library code takes a `Progress` (any `Callable[[str], None]`: one message a call) and,
for work it can count, asks `steps(progress, name, total, unit)` for a `Phase` and
reports `update(done, detail)` or `advance(n)` on it. What that looks like is decided
by whoever passed the callable:

- a `Reporter` (the CLI's, on stderr): on a terminal, one status line rewritten in
  place with `\\r` (padded with spaces over the last one, no escape codes) and cleared
  at the end; anywhere else (a log, CI, a pipe), one plain line each `every_s` while a
  phase runs (none for a phase shorter than that), and one as a phase that showed
  any ends: a small lab's `up` stays a few lines, a big one's never goes quiet;
- any other callable (a test's `list.append`, a logger): the same text a Reporter
  shows, as one message when the count or the detail changed, at most one a
  LINES_EVERY_S, and the last one.

The rate is taken over the phase so far (done since its first update / time since),
the ETA is what is left at that rate. Clock, stream and width are injectable: the
unit tests render exactly, with no wall clock.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import TextIO

from .errors import SettingError

Progress = Callable[[str], None]
Clock = Callable[[], float]
EVERY_S = 5.0  # without a terminal: at most one line a phase this often
TTY_EVERY_S = 0.1  # on a terminal: the status line is rewritten at most this often
LINES_EVERY_S = 1.0  # to a plain callable: at most one message a phase this often
EVERY_ENV = "ROCELAB_PROGRESS_EVERY"


def every_from(text: str | None) -> float:
    """The log-line interval ROCELAB_PROGRESS_EVERY asks for (unset or empty: EVERY_S)."""
    if not text:
        return EVERY_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise SettingError(f"{EVERY_ENV}={text!r}: must be a number of seconds > 0 "
                         f"(default {EVERY_S:g})")
    return value


def duration(seconds: float) -> str:
    """`42 s`, `3m05s`, `1h02m`: short enough for a status line."""
    s = math.floor(max(seconds, 0.0) + 0.5)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Phase:
    """One counted piece of work: `done` of `total` `unit`s, with what is still missing."""

    def __init__(self, show: Callable[[Phase, bool], None], name: str, total: int,
                 unit: str, clock: Clock) -> None:
        self.name, self.total, self.unit = name, total, unit
        self.done, self.detail = 0, ""
        self._show, self.clock = show, clock
        self.started = clock()
        self._first: tuple[float, int] | None = None  # (when, done) of the first update
        self._lock = threading.RLock()  # guest boots, namespaces advance from several threads
        self.ended = False
        self.shown_at = self.started  # when its renderer last showed it
        self.shown = False  # has it shown a line yet

    def update(self, done: int, detail: str = "") -> None:
        with self._lock:
            self.done, self.detail = done, detail
            if self._first is None:
                self._first = (self.clock(), done)
            self._show(self, False)

    def advance(self, n: int = 1, detail: str = "") -> None:
        with self._lock:  # read and add under one hold: no increment lost between threads
            self.update(self.done + n, detail)

    def end(self, detail: str = "") -> None:
        """The phase is over (its last line: the count and how long it took)."""
        with self._lock:
            if not self.ended:
                self.ended, self.detail = True, detail
                self._show(self, True)

    def __enter__(self) -> Phase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end(self.detail if exc[0] is None else "interrupted")

    def eta_s(self) -> float | None:
        """Seconds left at the rate seen so far; None before any progress was seen."""
        if self._first is None or self.done >= self.total:
            return None
        t0, d0 = self._first
        elapsed, gained = self.clock() - t0, self.done - d0
        if elapsed <= 0 or gained <= 0:
            return None
        return (self.total - self.done) / (gained / elapsed)

    def text(self, final: bool = False) -> str:
        """`routing: 120/264 routers converged (45%), 12 s, ETA 14 s, fib: 31 prefixes missing`:
        the detail last, where a terminal's width cuts it, not the ETA."""
        count = f"{self.done}/{self.total} {self.unit}".rstrip()
        if self.total:
            count += f" ({100 * self.done // self.total}%)"
        parts = [count, ("in " if final else "") + duration(self.clock() - self.started)]
        eta = None if final else self.eta_s()
        if eta is not None:
            parts.append(f"ETA {duration(eta)}")
        return f"{self.name}: " + ", ".join(parts + ([self.detail] if self.detail else []))


class Reporter:
    """Progress on one stream: a status line on a terminal, sparse lines elsewhere."""

    def __init__(self, stream: TextIO, *, tty: bool | None = None, every_s: float = EVERY_S,
                 clock: Clock = time.monotonic, width: int = 80, keep_alive: bool = True) -> None:
        """`keep_alive`: a thread calls `tick` about once a second (tests call it themselves)."""
        self.stream, self.every_s, self.clock, self.width = stream, every_s, clock, width
        self.tty = stream.isatty() if tty is None else tty
        self.start = clock()
        self._shown = 0  # columns of the status line now on the terminal
        self._lock = threading.Lock()
        self._active: Phase | None = None  # the phase `tick` shows again
        self._closed = threading.Event()
        self._ticker = threading.Thread(target=self._keep_alive, name="rocelab-progress",
                                        daemon=True) if keep_alive else None

    def __call__(self, msg: str) -> None:
        """A one-off message (a phase starting, a decision taken)."""
        with self._lock:
            self._write(msg)

    def phase(self, name: str, total: int, unit: str = "") -> Phase:
        p = Phase(self._show, name, total, unit, self.clock)
        self._active = p
        self._show(p, False)
        if self._ticker is not None and not self._ticker.is_alive() and not self._closed.is_set():
            self._ticker.start()
        return p

    def tick(self) -> None:
        """Show the running phase again when it is due, updated or not: one step (a poll of
        a 264-router fabric) can take longer than the interval, and the time still counts."""
        p = self._active
        if p is not None and not p.ended:
            self._show(p, False)

    def _keep_alive(self) -> None:
        while not self._closed.wait(min(1.0, self.every_s)):
            self.tick()

    def close(self) -> None:
        """Stop the ticks; clear the status line (a terminal): what follows starts clean."""
        self._closed.set()
        if self._ticker is not None and self._ticker.is_alive():
            self._ticker.join()
        with self._lock:
            if self.tty and self._shown:
                self.stream.write("\r" + " " * self._shown + "\r")
                self.stream.flush()
                self._shown = 0

    def _show(self, phase: Phase, final: bool) -> None:
        with self._lock:
            now = self.clock()
            if self.tty:  # at once, then at most each TTY_EVERY_S; the last one always
                due = final or not phase.shown or now - phase.shown_at >= TTY_EVERY_S
            elif final:  # the last line of a phase that showed, or took that long
                due = phase.shown or now - phase.started >= self.every_s
            else:  # a line each every_s; the count complete: the last line says it
                due = now - phase.shown_at >= self.every_s and phase.done < phase.total
            if due:
                phase.shown_at, phase.shown = now, True
                self._write(phase.text(final))

    def _write(self, text: str) -> None:
        if self.tty:
            line = text[:max(self.width - 1, 10)]
            self.stream.write("\r" + line + " " * max(self._shown - len(line), 0))
            self._shown = len(line)
        else:
            self.stream.write(f"[{self.clock() - self.start:6.1f}s] {text}\n")
        self.stream.flush()


class _Lines:
    """`steps` for a plain callable: every update as one message."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.last: tuple[int, int, str] | None = None

    def __call__(self, phase: Phase, final: bool) -> None:
        seen = (phase.done, phase.total, phase.detail)
        due = not phase.shown or phase.clock() - phase.shown_at >= LINES_EVERY_S
        if final or (seen != self.last and due):
            self.last, phase.shown, phase.shown_at = seen, True, phase.clock()
            self.progress(phase.text(final))


def steps(progress: Progress, name: str, total: int, unit: str = "",
          clock: Clock = time.monotonic) -> Phase:
    """A counted phase reported through `progress` (see the module's docstring)."""
    if isinstance(progress, Reporter):
        return progress.phase(name, total, unit)
    p = Phase(_Lines(progress), name, total, unit, clock)
    return p
