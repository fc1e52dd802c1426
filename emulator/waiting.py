"""Poll observable state against a deadline: the one wait loop (never a bare sleep).

    wait_until(lambda: sock.exists(), 15, what="the engine did not answer")

`predicate` is called until it returns something true, which is returned; it may
raise to stop the wait early (a process that died). At the deadline the error
says what did not happen and, with `seen`, what was seen instead:
"<what> within <timeout> s: <seen>".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from .errors import RocelabError

T = TypeVar("T")


class WaitTimeout(RocelabError):
    """Something polled for did not happen in time (the message: what, and what was seen)."""


def timeout_message(what: str, timeout_s: float, seen: str | None = None) -> str:
    """The timeout's one line: `what` (as the sentence starts), the time, what was seen."""
    return f"{what} within {timeout_s:g} s" + (f": {seen}" if seen else "")


def wait_until(predicate: Callable[[], T | None], timeout_s: float, interval_s: float = 0.05, *,
               what: str, seen: Callable[[], str] | None = None,
               error: Callable[[str], Exception] = WaitTimeout) -> T:
    """Call `predicate` every `interval_s` until it returns a true value (returned), for at
    most `timeout_s`; it is always called at least once, and once more at the deadline.

    On timeout raises `error(timeout_message(what, timeout_s, seen()))`: `what` says what
    did not happen ("lab x not converged", "the controller was not ready"), `seen()` what
    was last seen; `error` is the typed error the caller's exit code needs (WaitTimeout).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        got = predicate()
        if got:
            return got
        left = deadline - time.monotonic()
        if left <= 0:
            raise error(timeout_message(what, timeout_s, seen() if seen else None))
        time.sleep(min(interval_s, left))
