"""The host's end of an rxe guest's agent protocol (emulator/rxe/agent.py).

A `Channel` owns one connected stream socket (a QEMU virtio-serial chardev) and
multiplexes concurrent requests over it: each request gets an id, a reader thread
hands each reply to the caller waiting on that id. Ids carry a per-channel nonce,
so a reply meant for an earlier client of the same port is never taken for ours.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import threading
import time
from typing import Any

from ..errors import RocelabError
from .agent import MAX_LINE, Lines, LineTooLong


class AgentError(RocelabError):
    pass


class Channel:
    def __init__(self, sock: socket.socket, max_line: int = MAX_LINE) -> None:
        self.sock = sock
        self.max_line = max_line  # of one line from the agent (agent.MAX_LINE: 16 MiB)
        self.nonce = os.urandom(4).hex()
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.waiting: dict[str, tuple[threading.Event, list[dict[str, Any]]]] = {}
        self.closed: str | None = None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        lines = Lines(self.max_line)
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError as e:
                data, why = b"", str(e)
            else:
                why = "the guest closed the connection"
            if not data:
                self._fail(why)
                return
            try:
                got = lines.feed(data)
            except LineTooLong as e:  # a guest that never ends its line: drop it
                self._fail(f"the agent sent {e}: connection dropped")
                with contextlib.suppress(OSError):
                    self.sock.shutdown(socket.SHUT_RDWR)
                return
            for line in got:
                self._deliver(line)

    def _deliver(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
        except ValueError:
            return  # not ours to judge: console noise never reaches this port, a torn line might
        with self.lock:
            slot = self.waiting.pop(str(msg.get("id")), None)
        if slot:
            slot[1].append(msg)
            slot[0].set()

    def _fail(self, why: str) -> None:
        with self.lock:
            self.closed = why
            slots, self.waiting = list(self.waiting.values()), {}
        for event, _ in slots:
            event.set()

    def request(self, op: str, wait_s: float | None = None, **fields: Any) -> dict[str, Any]:
        """Send one request, wait for its reply; AgentError if the agent says no."""
        rid = f"{self.nonce}-{next(self.ids)}"
        event: threading.Event = threading.Event()
        box: list[dict[str, Any]] = []
        with self.lock:
            if self.closed:
                raise AgentError(f"agent connection lost: {self.closed}")
            self.waiting[rid] = (event, box)
        self.sock.sendall(json.dumps({"id": rid, "op": op} | fields).encode() + b"\n")
        if not event.wait(wait_s):
            with self.lock:
                self.waiting.pop(rid, None)
            raise TimeoutError(f"no reply to {op} within {wait_s} s")
        if not box:
            raise AgentError(f"agent connection lost: {self.closed}")
        reply = box[0]
        if not reply.get("ok"):
            raise AgentError(f"agent: {op} failed: {reply.get('error')}")
        return reply

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.reader.join(timeout=1)

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def hello(channel: Channel, deadline: float) -> dict[str, Any]:
    """Ask until the agent answers (before the guest has opened its port, a request waits
    in the socket; asking again covers a hello lost to a port being opened)."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the agent did not say hello")
        try:
            return channel.request("hello", wait_s=min(left, 2.0))
        except TimeoutError:
            continue
