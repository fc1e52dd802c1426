"""`procs.kill_pids` signals only the lab's own processes, and re-checks before SIGKILL.

Children of the test carry a ROCELAB_LAB tag (as every lab process does); a process that
ignores SIGTERM stands in for one that needs the SIGKILL. No root, no lab."""

from __future__ import annotations

import os
import subprocess

import pytest

from emulator import procs
from emulator.paths import ENV_TAG

STUBBORN = "trap '' TERM; echo ready; exec sleep 60"  # ignores SIGTERM (sleep inherits it)


@pytest.fixture
def spawn():
    started: list[subprocess.Popen[str]] = []

    def start(tag: str, script: str = STUBBORN) -> subprocess.Popen[str]:
        proc = subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, text=True,
                                env={"PATH": os.environ["PATH"], ENV_TAG: tag})
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"  # trap is set
        return proc
    yield start
    for proc in started:  # only the PIDs this test started
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_a_tagged_process_that_ignores_sigterm_gets_sigkill(spawn):
    proc = spawn("xc-mine")
    procs.kill_pids([proc.pid], "xc-mine", timeout_s=0.2)
    proc.wait(10)  # it ends (TimeoutExpired if it was left running; also if the tag read
    # right after "ready", mid-exec of sleep, was taken for "untagged")


def test_a_process_of_another_lab_is_not_signalled(spawn):
    other = spawn("xc-other", "echo ready; exec sleep 60")  # SIGTERM would end it
    procs.kill_pids([other.pid], "xc-mine", timeout_s=0.2)
    assert other.poll() is None


def test_the_tag_is_checked_again_before_sigkill(spawn, monkeypatch):
    # The PID stops carrying the lab's tag while kill_pids waits (as a reused PID would):
    # no SIGKILL for it.
    proc = spawn("xc-mine")
    seen = iter(["xc-mine"])  # the first check sees the lab's tag, every later one not
    monkeypatch.setattr(procs, "process_tag", lambda pid: next(seen, "xc-someone-else"))
    procs.kill_pids([proc.pid], "xc-mine", timeout_s=0.2)
    assert proc.poll() is None


def test_a_process_that_exits_on_sigterm_ends_the_wait(spawn):
    proc = spawn("xc-mine", "echo ready; exec sleep 60")
    procs.kill_pids([proc.pid], "xc-mine", timeout_s=60)  # returns when it exits, not at 60 s
    proc.wait(10)
    procs.kill_pids([proc.pid], "xc-mine", timeout_s=0.1)  # gone and reaped: nothing to do


def test_at_once_gets_sigkill_without_waiting_out_sigterm(spawn):
    # It ignores SIGTERM: were it sent SIGTERM first, the wait would run its full 60 s.
    proc = spawn("xc-mine")
    told: list[int] = []
    procs.kill_pids([proc.pid], "xc-mine", timeout_s=60, exited=told.append, at_once={proc.pid})
    proc.wait(10)  # ended (reaped by kill_pids), without the 60 s wait
    assert told == [1]


def test_at_once_is_still_only_for_the_labs_own(spawn):
    other = spawn("xc-other", "echo ready; exec sleep 60")
    procs.kill_pids([other.pid], "xc-mine", timeout_s=0.1, at_once={other.pid})
    assert other.poll() is None
