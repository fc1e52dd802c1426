"""How much memory an engine registers at once, capped.

Every transfer registers a region on each end: the initiator's own, and one a peer
asks for over TCP 18515 (`accept`, up to 4 GiB: job.MAX_TRANSFER). Any host on the
fabric may ask, so without a cap a few requests at once make a root process allocate
the host's memory. The total an engine holds is checked (and reserved) before a byte
is allocated; beyond it the request is refused with an error reply.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import EngineError

DEFAULT_MAX_REGISTERED = 8 << 30  # two of the largest transfers at once, per engine
ENV_MAX_REGISTERED = "ROCELAB_ENGINE_MAX_REGISTERED"  # bytes (e.g. 16GiB), read by the CLI


class Regions:
    """Bytes of memory regions held at once, at most `cap`."""

    def __init__(self, cap: int) -> None:
        self.cap, self.held = cap, 0
        self._lock = threading.Lock()

    @contextmanager
    def hold(self, nbytes: int, who: str) -> Iterator[None]:
        """Reserve `nbytes` for the block (EngineError if that would pass the cap)."""
        with self._lock:
            if nbytes > self.cap - self.held:
                raise EngineError(f"{who} asks for a {nbytes}-byte region while this engine "
                                  f"holds {self.held} of at most {self.cap} bytes "
                                  f"({ENV_MAX_REGISTERED}): refused")
            self.held += nbytes
        try:
            yield
        finally:
            with self._lock:
                self.held -= nbytes
