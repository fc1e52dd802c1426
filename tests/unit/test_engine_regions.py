"""An engine holds at most max_registered_bytes of memory regions at once: a fabric peer's
`accept` beyond it is refused with an error reply, before anything is allocated."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from emulator.engine.config import EngineConfig, max_registered
from emulator.engine.daemon import Engine
from emulator.engine.job import Job, Op
from emulator.engine.jsonlines import Channel
from emulator.engine.regions import DEFAULT_MAX_REGISTERED, Regions
from emulator.errors import EngineError, RocelabError


def test_regions_are_reserved_up_to_the_cap_and_released():
    regions = Regions(1000)
    with regions.hold(600, "a"):
        with pytest.raises(EngineError, match=r"^b asks for a 500-byte region while this engine "
                                              r"holds 600 of at most 1000 bytes"):
            with regions.hold(500, "b"):
                pass
        with regions.hold(400, "c"):
            assert regions.held == 1000
    assert regions.held == 0


def test_the_cap_is_configurable_and_checked():
    assert max_registered({}) == DEFAULT_MAX_REGISTERED == 8 << 30
    assert max_registered({"ROCELAB_ENGINE_MAX_REGISTERED": "16GiB"}) == 16 << 30
    with pytest.raises(RocelabError, match="ROCELAB_ENGINE_MAX_REGISTERED"):
        max_registered({"ROCELAB_ENGINE_MAX_REGISTERED": "lots"})
    assert EngineConfig.from_json(EngineConfig(max_registered_bytes=5).to_json()).max_registered_bytes == 5


def _accept(engine: Engine, job: Job) -> dict:
    """A peer's `accept` to the engine's responder, as 18515 serves it; the reply."""
    mine, theirs = socket.socketpair()
    with Channel(mine) as peer:
        peer.send({"cmd": "accept", "job": job.to_json(), "qps": [{"qpn": 1, "psn": 0}],
                   "ip": "10.9.9.9"})
        engine._guarded(engine.on_peer, theirs)
        return peer.recv()


def test_a_peer_asking_beyond_the_cap_gets_an_error_reply(tmp_path: Path, monkeypatch):
    engine = Engine("xc-unit", "decode1", "127.0.0.1", tmp_path / "engine.sock",
                    EngineConfig(max_registered_bytes=1 << 20))
    allocated = []
    monkeypatch.setattr(engine.dp, "call", lambda fn: allocated.append(fn))  # no data thread
    reply = _accept(engine, Job(Op.WRITE, size=2 << 20))
    assert reply["event"] == "error"
    assert reply["error"].startswith("peer 10.9.9.9 asks for a 2097152-byte region while this "
                                     "engine holds 0 of at most 1048576 bytes")
    assert allocated == [] and engine.regions.held == 0  # refused before registering anything
