"""Fixtures of the RoCE unit tests: real Linux rxe captures (tests/fixtures/rxe/README.md),
a loopback UDP pair."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from emulator.roce.pcap import read_pcap

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "rxe"


def load(name: str) -> list[bytes]:
    """Ethernet frames of one capture, in order."""
    return [record.data for record in read_pcap(FIXTURES / name)]


@pytest.fixture(scope="session")
def write3k() -> list[bytes]:
    """ib_write_bw -s 3072 -n 5 -m 1024 between two rxe hosts: 20 frames."""
    return load("wire_write3k.pcap")


@pytest.fixture(scope="session")
def pingpong() -> list[bytes]:
    """ibv_rc_pingpong between rxe (10.99.1.1) and another RC peer: 801 frames,
    one of which carries a deliberately corrupted ICRC."""
    return load("pp.pcap")


@pytest.fixture(scope="session")
def all_frames(write3k: list[bytes], pingpong: list[bytes]) -> list[bytes]:
    return write3k + pingpong


@pytest.fixture(params=["python", "compiled"])
def data_path(request, monkeypatch) -> str:
    """Run a simulated-wire test on both data paths (roce_sim.DATA_PATH): the compiled
    one builds with QueuePair.poll(runs=True) and _wire.Sender."""
    import roce_sim

    from emulator.roce import wire

    if request.param == "compiled" and wire.compiled() is None:
        pytest.skip("emulator.roce._wire is not built")
    monkeypatch.setattr(roce_sim, "DATA_PATH", request.param)
    return request.param


@pytest.fixture
def loopback_udp():
    """UDP over loopback, for what the sender addresses; reads wait (up to 5 s) for the
    softirq that delivers a loopback datagram, deferred on a loaded machine."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(5)
    yield tx, rx
    tx.close()
    rx.close()
