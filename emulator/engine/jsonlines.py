"""Newline-delimited JSON messages over stream sockets (TCP between engines, unix to the CLI).

A line is at most `max_line` bytes (MAX_LINE, 1 MiB, for what an engine reads: a peer's
requests are a few hundred bytes; MAX_REPLY_LINE, 64 MiB, for the CLI reading its own
engine's replies, whose `stats` grow with the QPs): a longer one is never buffered whole,
the connection is dropped with an EngineError.
"""

from __future__ import annotations

import contextlib
import json
import socket
from typing import Any

from ..errors import EngineError

MAX_LINE = 1 << 20  # bytes of one message an engine reads from a peer or the CLI
MAX_REPLY_LINE = 64 << 20  # bytes of one reply the CLI reads from its engine


class Channel:
    """One JSON message per line, both ways, on a connected stream socket."""

    def __init__(self, sock: socket.socket, max_line: int = MAX_LINE):
        self.sock = sock
        self.max_line = max_line
        self._rfile = sock.makefile("rb")

    def send(self, msg: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(msg, separators=(",", ":")).encode() + b"\n")

    def recv(self) -> dict[str, Any]:
        try:
            line = self._rfile.readline(self.max_line + 1)
        except TimeoutError:  # the peer went quiet: name it, not the socket's bare "timed out"
            raise EngineError(f"no reply from the peer within {self.sock.gettimeout():g} s "
                              "(control connection over the fabric lost)") from None
        if not line:
            raise EngineError("control connection closed by peer")
        if len(line) > self.max_line and not line.endswith(b"\n"):  # max bytes and no end
            with contextlib.suppress(OSError):  # dropped: nothing more is read from it
                self.sock.shutdown(socket.SHUT_RDWR)
            raise EngineError(f"control message longer than {self.max_line} bytes: "
                              "connection dropped")
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            raise EngineError(f"bad control message: {line[:80]!r}") from None

    def close(self) -> None:
        try:
            self._rfile.close()
        finally:
            self.sock.close()

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
