"""`procs`: a tagged helper started and waited for until ready; one that never gets ready or
dies is killed by PID, and the error says what was waited for and shows its log's tail."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from emulator import procs
from emulator.errors import EngineError, RealizeError

LAB = "xc-procs"


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def gone(pid: int) -> bool:
    """Exited (and reaped: kill_pids reaps what it stops)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return procs.process_tag(pid) is None  # a zombie has no environment left


@pytest.fixture
def started():
    """Every helper a test starts, stopped afterwards (by PID: only these)."""
    helpers: list[procs.Helper] = []

    def start(code: str, log: Path | None, **how) -> procs.Helper:
        helper = procs.start(LAB, python(code), name="the fake helper", log=log, **how)
        helpers.append(helper)
        return helper
    yield start
    procs.kill_pids([h.pid for h in helpers], LAB, timeout_s=1)


def test_a_helper_carries_the_tag_and_is_ready_when_its_file_appears(tmp_path, started):
    ready = tmp_path / "ready"
    helper = started(f"import pathlib, time; pathlib.Path({str(ready)!r}).write_text('ok'); "
                     "time.sleep(60)", tmp_path / "h.log")
    helper.wait_ready(procs.file_appears(ready), 10)
    assert procs.process_tag(helper.pid) == LAB
    assert procs.tagged_processes()[helper.pid] == LAB
    assert (tmp_path / "h.log").stat().st_mode & 0o777 == 0o600
    helper.stop()
    assert gone(helper.pid)


def test_start_ready_returns_it_once_a_callable_probe_says_so(tmp_path):
    log = tmp_path / "w.log"
    helper = procs.start_ready(
        LAB, python("import time; print('armed', flush=True); time.sleep(60)"),
        procs.Ready("'armed' in w.log", lambda: "armed" in log.read_text()), 10,
        name="the watchdog", log=log)
    try:
        assert procs.process_tag(helper.pid) == LAB
    finally:
        helper.stop()


def test_one_that_never_gets_ready_is_killed_and_the_error_says_what_it_waited_for(
        tmp_path, started):
    helper = started("import time; print('loading the plan', flush=True); time.sleep(60)",
                     tmp_path / "slow.log")
    t0 = time.monotonic()
    with pytest.raises(RealizeError) as e:
        helper.wait_ready(procs.file_appears(tmp_path / "never"), 0.5)
    assert time.monotonic() - t0 < 5
    assert str(e.value) == ("the fake helper not ready within 0.5 s: waited for never to appear; "
                            "slow.log: loading the plan")
    assert gone(helper.pid)


def test_one_that_dies_is_reported_at_once_with_its_exit_code_and_log(tmp_path, started):
    helper = started("import sys; print('one'); print('bpf: permission denied'); sys.exit(3)",
                     tmp_path / "dies.log", error=EngineError)
    t0 = time.monotonic()
    with pytest.raises(EngineError, match=r"^the fake helper exited \(3\) before never to "
                                          r"appear; dies\.log: one \| bpf: permission denied$"):
        helper.wait_ready(procs.file_appears(tmp_path / "never"), 30)
    assert time.monotonic() - t0 < 10  # not the 30 s


def test_several_against_one_deadline_the_rest_are_killed_when_one_fails(tmp_path, started):
    ok = tmp_path / "ok"
    fine = started(f"import pathlib, time; pathlib.Path({str(ok)!r}).touch(); time.sleep(60)", None)
    slow = started("import time; time.sleep(60)", None)
    with pytest.raises(RealizeError, match="not ready within 0.3 s: the fake helper waited for "
                                           "never to appear; no log"):
        procs.wait_ready([(fine, procs.file_appears(ok)),
                          (slow, procs.file_appears(tmp_path / "never"))], 0.3)
    assert gone(slow.pid)
    assert not gone(fine.pid)  # ready: it stays, as a started engine does


def test_an_interrupt_while_waiting_kills_it_too(tmp_path, started):
    helper = started("import time; time.sleep(60)", None)

    def interrupted() -> bool:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        helper.wait_ready(procs.Ready("anything", interrupted), 10)
    assert gone(helper.pid)


def test_it_runs_under_the_helper_umask(tmp_path, started):
    out = tmp_path / "made"
    helper = started(f"open({str(out)!r}, 'w').close(); import time; time.sleep(60)", None)
    helper.wait_ready(procs.file_appears(out), 10)
    assert out.stat().st_mode & 0o777 == 0o600
