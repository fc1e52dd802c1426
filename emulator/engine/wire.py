"""Newline-delimited JSON messages over stream sockets (TCP between engines, unix to the CLI)."""

from __future__ import annotations

import json
import socket
from typing import Any

from ..errors import EngineError


class Channel:
    """One JSON message per line, both ways, on a connected stream socket."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._rfile = sock.makefile("rb")

    def send(self, msg: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(msg, separators=(",", ":")).encode() + b"\n")

    def recv(self) -> dict[str, Any]:
        try:
            line = self._rfile.readline()
        except TimeoutError:  # the peer went quiet: name it, not the socket's bare "timed out"
            raise EngineError(f"no reply from the peer within {self.sock.gettimeout():g} s "
                              "(control connection over the fabric lost)") from None
        if not line:
            raise EngineError("control connection closed by peer")
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
