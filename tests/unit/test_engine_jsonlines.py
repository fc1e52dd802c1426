"""The engines' control channel: a quiet peer is named, never a bare "timed out"."""

from __future__ import annotations

import contextlib
import socket
import threading

import pytest

from emulator.engine.jsonlines import MAX_LINE, Channel
from emulator.errors import EngineError


def test_a_quiet_peer_is_reported_as_lost_control_connection():
    a, b = socket.socketpair()
    a.settimeout(0.05)
    with Channel(a) as ch, Channel(b):
        with pytest.raises(EngineError, match="no reply from the peer within 0.05 s"):
            ch.recv()


def test_messages_round_trip_and_a_closed_peer_is_named():
    a, b = socket.socketpair()
    with Channel(a) as ch:
        peer = Channel(b)
        peer.send({"cmd": "finish", "n": 1})
        assert ch.recv() == {"cmd": "finish", "n": 1}
        peer.close()
        with pytest.raises(EngineError, match="closed by peer"):
            ch.recv()


def _flood(sock: socket.socket, n: int) -> threading.Thread:
    """Send n bytes with no newline from a thread (a peer that never ends its line)."""
    def send() -> None:
        with contextlib.suppress(OSError):  # the reader drops us: EPIPE / ECONNRESET
            sock.sendall(b"x" * n)
    t = threading.Thread(target=send, daemon=True)
    t.start()
    return t


def test_a_line_longer_than_the_cap_drops_the_connection():
    a, b = socket.socketpair()
    with Channel(a, max_line=1024) as ch, Channel(b) as peer:
        t = _flood(b, 64 * 1024)
        with pytest.raises(EngineError, match="longer than 1024 bytes: connection dropped"):
            ch.recv()
        t.join(10)
        assert not t.is_alive()  # its sendall failed: we stopped reading and shut it down
        assert peer.sock.recv(1) == b""  # our end is shut


def test_the_default_cap_is_what_engines_read_from_peers():
    a, b = socket.socketpair()
    with Channel(a) as ch, Channel(b):
        assert ch.max_line == MAX_LINE
        _flood(b, MAX_LINE + 10)
        with pytest.raises(EngineError, match=f"longer than {MAX_LINE} bytes"):
            ch.recv()


def test_a_message_of_exactly_the_cap_passes():
    a, b = socket.socketpair()
    with Channel(a, max_line=64) as ch, Channel(b) as peer:
        body = '{"cmd":"' + "y" * (64 - 10) + '"}'
        assert len(body) == 64
        peer.sock.sendall(body.encode() + b"\n")
        assert ch.recv() == {"cmd": "y" * 54}


def test_the_metrics_collector_reads_an_engine_reply_with_the_same_bound(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from emulator.metrics.collectors import engine as collector

    monkeypatch.setattr(collector, "MAX_REPLY_LINE", 1024)
    monkeypatch.setattr(collector, "node_run_dir", lambda lab, host: tmp_path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp_path / "engine.sock"))
    server.listen(1)

    def answer() -> None:  # an engine whose stats never end their line
        conn, _ = server.accept()
        with conn, contextlib.suppress(OSError):
            conn.recv(100)
            conn.sendall(b"{" * (1 << 20))
    t = threading.Thread(target=answer, daemon=True)
    t.start()
    ask = collector.Collector._ask(SimpleNamespace(plan=SimpleNamespace(lab="xc")),  # type: ignore[arg-type]
                                   SimpleNamespace(name="h"))
    assert ask == {"event": "error", "error": "reply over 1024 bytes"}
    t.join(10)
    server.close()
