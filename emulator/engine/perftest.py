"""The engine's perftest jobs: a server armed on the engine's TCP 18515, a client that
connects to any perftest server (another engine, or real perftest on an rxe host).

Port 18515 is the engine's already (its peer channel, JSON lines); a perftest
client is told apart by its first byte: perftest's first message is its
version string ("6.06..."), an engine's a JSON object ("{"). So the port is
always open, and a perftest client is served only while a server job is armed
(`rocelab perftest --server`, or the CLI arming the destination of an
engine-to-engine run); otherwise its connection is closed at once, as a
refused connection ends a real client ("Couldn't read remote address").
Each session runs on the engine's own QPs and memory (the engine is its
`perftest.session.QueuePairs`); `hosts/perftest.py` is the CLI's side.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
from typing import Any

from ..errors import EngineError, RocelabError
from ..perftest.exchange import PORT, Exchange
from ..perftest.session import Options, QueuePairs, Session

log = logging.getLogger("rocelab.engine")
PEEK_TIMEOUT_S = 10.0  # perftest's client sleeps 1 s before its first message (write_bw)
CONNECT_TIMEOUT_S = 10.0


def is_engine_peer(conn: socket.socket) -> bool | None:
    """True for an engine's JSON channel, False for perftest, None if it closed silently."""
    conn.settimeout(PEEK_TIMEOUT_S)
    try:
        first = conn.recv(1, socket.MSG_PEEK)
    except (TimeoutError, OSError):
        return None
    return None if not first else first == b"{"


class PerftestJobs:
    """At most one armed server per engine; clients run on the calling thread."""

    def __init__(self, engine: QueuePairs):
        self.engine = engine
        self._lock = threading.Lock()
        self._armed: tuple[Options, queue.SimpleQueue[dict[str, Any]]] | None = None

    def serve_client(self, conn: socket.socket) -> None:
        """A perftest client connected to 18515: run the armed server job on it."""
        with self._lock:
            armed, self._armed = self._armed, None
        if armed is None:
            log.warning("perftest client from %s but no server job armed: closed",
                        _peer(conn))
            conn.close()
            return
        opts, results = armed
        results.put(self._run(conn, opts, client=False))

    def server(self, opts: Options, timeout_s: float, ready: Any = None) -> dict[str, Any]:
        """Arm a server job, wait for one client, return the session's result."""
        results: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        with self._lock:
            if self._armed is not None:
                raise EngineError(f"{self.engine.host}: a perftest server is already waiting "
                                  f"on port {PORT}")
            self._armed = (opts, results)
        if ready:
            ready()
        try:
            return results.get(timeout=timeout_s)
        except queue.Empty:
            with self._lock:
                if self._armed is not None and self._armed[1] is results:
                    self._armed = None
            raise EngineError(f"no perftest client connected to {self.engine.ip}:{PORT} "
                              f"within {timeout_s:.0f} s") from None

    def client(self, opts: Options, peer_ip: str) -> dict[str, Any]:
        try:
            conn = socket.create_connection((peer_ip, PORT), timeout=CONNECT_TIMEOUT_S)
        except OSError as e:
            raise EngineError(f"cannot reach a perftest server at {peer_ip}:{PORT} "
                              f"({e.strerror or e})") from None
        res = self._run(conn, opts, client=True)
        if "error" in res:
            raise EngineError(res["error"])
        return res

    def _run(self, conn: socket.socket, opts: Options, client: bool) -> dict[str, Any]:
        try:
            with conn:
                return Session(self.engine, opts, client).run(Exchange(conn, client))
        except (RocelabError, OSError) as e:
            log.warning("perftest %s %s: %s", opts.test.value, "client" if client else "server", e)
            return {"error": str(e) or type(e).__name__}


def _peer(conn: socket.socket) -> str:
    try:
        return str(conn.getpeername()[0])
    except OSError:
        return "?"
