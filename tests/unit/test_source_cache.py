"""An engine makes a transfer's test data (seeded random bytes) once and keeps it: each
later transfer of the same seed and size gets a fresh copy and its source digest without
generating or hashing 12 MiB again (docs/mrc.md "Collisions": 0.1-0.35 s of every
handoff), and an experiment has it made before the run is timed (`prepare`)."""

from __future__ import annotations

import random
import socket
from collections import OrderedDict
from pathlib import Path

import pytest

from emulator.engine import job as jobmod
from emulator.engine.config import EngineConfig
from emulator.engine.daemon import Engine
from emulator.engine.job import Job, Op, digest, prepare_source, source_bytes, source_digest
from emulator.engine.jsonlines import Channel


@pytest.fixture(autouse=True)
def empty_cache(monkeypatch):
    monkeypatch.setattr(jobmod, "_sources", OrderedDict())
    monkeypatch.setattr(jobmod, "_digests", {})


def test_a_kept_region_is_the_same_bytes_in_a_fresh_buffer():
    job = Job(Op.WRITE, size=100_000, seed=7)
    first = source_bytes(job)
    assert first == random.Random(7).randbytes(job.region_bytes)  # the seeded bytes, as ever
    first[0] ^= 0xFF  # a transfer's buffer is its own: writing it changes no later one
    again = source_bytes(job)
    assert again is not first and again == random.Random(7).randbytes(job.region_bytes)
    assert source_bytes(Job(Op.WRITE, size=100_000, seed=8)) != again  # the seed is the key


def test_the_cache_keeps_at_most_its_budget_least_recently_used_out(monkeypatch):
    monkeypatch.setattr(jobmod, "SOURCE_CACHE_MAX", 250_000)
    a, b, c = (Job(Op.WRITE, size=100_000, seed=s) for s in (1, 2, 3))
    source_bytes(a), source_bytes(b), source_bytes(a), source_bytes(c)  # b: least recent
    kept = {key[0] for key in jobmod._sources}
    assert kept == {1, 3} and sum(map(len, jobmod._sources.values())) <= 250_000
    source_bytes(Job(Op.WRITE, size=300_000, seed=4))  # beyond the budget: never kept
    assert {key[0] for key in jobmod._sources} == {1, 3}


def test_the_source_digest_is_hashed_once_per_region_and_segments():
    job = Job(Op.WRITE, size=3 << 20, seed=5)
    buf, segments = source_bytes(job), job.segments()
    want = digest(buf, segments, "src")
    assert source_digest(job, buf, segments) == want
    # memoized: a later transfer's copy is not hashed again (a zeroed buffer proves it)
    assert source_digest(job, bytearray(len(buf)), segments) == want
    other = Job(Op.WRITE, size=3 << 20, seed=6)  # not kept: hashed as given
    zeros = bytearray(other.region_bytes)
    assert source_digest(other, zeros, other.segments()) == digest(zeros, other.segments(), "src")


def test_prepare_keeps_small_regions_only(monkeypatch):
    monkeypatch.setattr(jobmod, "SOURCE_CACHE_MAX", 1 << 20)
    assert not prepare_source(Job(Op.WRITE, size=2 << 20))
    assert not jobmod._sources and not jobmod._digests  # nothing made
    small = Job(Op.WRITE, size=512 << 10, seed=9)
    assert prepare_source(small)
    assert len(jobmod._sources) == 1 and len(jobmod._digests) == 1


def test_the_engine_answers_prepare(tmp_path: Path):
    engine = Engine("xj-unit", "prefill1", "127.0.0.1", tmp_path / "engine.sock",
                    EngineConfig())
    mine, theirs = socket.socketpair()
    with Channel(mine) as cli:
        cli.send({"cmd": "prepare", "job": Job(Op.WRITE, size=1 << 20, seed=3).to_json()})
        engine._guarded(engine.on_cli, theirs)
        assert cli.recv() == {"event": "prepared", "cached": True}
    assert [key[:2] for key in jobmod._sources] == [(3, 1 << 20)]


def test_an_engine_without_prepare_costs_only_the_optimisation(monkeypatch):
    from emulator.engine import client
    from emulator.errors import EngineError

    def old_engine(plan, host, msg):
        raise EngineError("prefill1: unknown command 'prepare'")

    monkeypatch.setattr(client, "_request", old_engine)
    assert client.prepare(None, None, Job(Op.WRITE, size=1 << 20)) is False  # type: ignore[arg-type]
