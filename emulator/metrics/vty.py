"""Ask an FRR daemon a `show ... json` question over its vty socket, as vtysh does.

vtysh is a ~50 ms process per call on these machines (it connects to every
daemon of the router); the scrape budget is 200 ms for the whole fabric.
The protocol vtysh itself speaks is tiny: write the command line with a
trailing NUL to `<daemon>.vty`, read until three NULs and a status byte.
The JSON is the same text `vtysh -c '...'` prints.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from ..errors import RocelabError

TIMEOUT_S = 2.0
END = b"\0\0\0"


class VtyError(RocelabError):
    """An FRR daemon did not answer, or not with JSON."""


def command(path: Path, line: str, timeout_s: float = TIMEOUT_S) -> str:
    """The text a daemon prints for one command line."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        try:
            s.connect(str(path))
            s.sendall(line.encode() + b"\0")
            buf = bytearray()
            while not (len(buf) >= 4 and buf[-4:-1] == END):
                chunk = s.recv(1 << 16)
                if not chunk:
                    raise VtyError(f"{path.name}: connection closed before the answer to "
                                   f"{line!r} ended")
                buf += chunk
        except OSError as e:
            raise VtyError(f"{path}: {e.strerror or e}") from None
    if buf[-1] != 0:
        raise VtyError(f"{path.name}: {line!r} failed (status {buf[-1]}): {bytes(buf[:-4])[:80]!r}")
    return buf[:-4].decode(errors="replace")


def command_json(path: Path, line: str, timeout_s: float = TIMEOUT_S) -> Any:
    text = command(path, line, timeout_s)
    try:
        return json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        raise VtyError(f"{path.name}: not JSON from {line!r}: {text[:80]!r}") from None
