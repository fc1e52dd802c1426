"""The engines' control channel: a quiet peer is named, never a bare "timed out"."""

from __future__ import annotations

import socket

import pytest

from emulator.engine.wire import Channel
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
