"""Known-answer fixtures: real Linux rxe captures (see tests/fixtures/rxe/README.md)."""

from __future__ import annotations

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
