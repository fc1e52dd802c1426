"""A transfer that cannot finish within its bound is refused before it starts, and a size
is a whole number of bytes (issue 24: `transfer --rate 1K` ran for hours with no word, and
`--size 1.5` moved 1 byte)."""

from __future__ import annotations

import pytest

from emulator import workload
from emulator.engine.job import Job, Op
from emulator.errors import ExitCode, RocelabError, TooLongError
from emulator.experiment import runner
from emulator.experiment.spec import Experiment
from emulator.lab import load_topology
from emulator.spec import validate

MiB = 1 << 20


@pytest.fixture(scope="module")
def plain():
    return load_topology("topologies/clos-2x4.yaml")[1]


@pytest.fixture(scope="module")
def shaped():
    return load_topology("topologies/clos-2x4-cc.yaml")[1]


def test_a_rate_that_cannot_move_the_size_in_time_is_refused(plain):
    job = Job(Op.WRITE, size=64 * MiB, rate_bps=1000.0, timeout_s=600.0)
    with pytest.raises(TooLongError) as err:
        workload.check_duration(plain, job, plain.node("prefill1"))
    msg = str(err.value)
    assert err.value.exit_code == ExitCode.USAGE and "\n" not in msg
    assert msg == ("67108864 bytes from prefill1 at 1000 bit/s (wall) take at least 6.21 days, "
                   "more than --max-duration 10 min: raise --max-duration or the rate, or "
                   "move fewer bytes")


def test_the_bound_is_the_users_to_raise(plain):
    job = Job(Op.WRITE, size=64 * MiB, rate_bps=1000.0, timeout_s=7 * 86400.0)
    workload.check_duration(plain, job, plain.node("prefill1"))  # 6.2 days < 7 days: runs


def test_an_unlimited_transfer_on_an_unshaped_lab_has_no_bound_to_check(plain):
    workload.check_duration(plain, Job(Op.WRITE, size=1 << 30, timeout_s=1.0),
                            plain.node("prefill1"))


def test_a_shaped_lab_bounds_it_by_the_line_rate_in_wall_time(shaped):
    cp = shaped.congestion
    src = shaped.node("prefill1")
    line_bps = sum(cp.rate_of(i.speed_bps) for i in src.interfaces)
    fits = Job(Op.WRITE, size=int(line_bps * 50 / 8), timeout_s=60.0)
    workload.check_duration(shaped, fits, src)
    too_big = Job(Op.WRITE, size=int(line_bps * 70 / 8), timeout_s=60.0)
    with pytest.raises(TooLongError, match=rf"under dilation {shaped.dilation:g}\) take at "
                       r"least 70 s, more than --max-duration 60 s"):
        workload.check_duration(shaped, too_big, src)


def test_kv_checks_every_pair_before_the_first_handoff(plain):
    pairs = workload.default_pairs(plain)
    job = Job(Op.WRITE, kv={"model": "llama3-8b", "tokens": 64}, rate_bps=1000.0,
              timeout_s=60.0)
    with pytest.raises(TooLongError, match="--max-duration 60 s"):
        workload.run_kv(plain, pairs, job, requests=1, concurrency=1)


def test_an_experiment_flow_that_cannot_finish_before_the_run_ends_is_refused(plain):
    doc = {"name": "e", "topology": "t.yaml", "duration": "30s",
           "flows": [{"name": "slow", "src": "prefill1", "dst": "decode1", "size": "64MiB",
                      "rate": "1K", "at": "10s"}]}
    exp = validate(Experiment, doc, "e.yaml")
    with pytest.raises(RocelabError, match=r"^flows.slow: 67108864 bytes .* more than the "
                       r"experiment's duration after its start 20 s"):
        runner.check(exp, plain)
    doc["flows"][0]["rate"] = "100G"
    runner.check(validate(Experiment, doc, "e.yaml"), plain)
