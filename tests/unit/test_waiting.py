"""`waiting.wait_until`: the one poll loop; its timeout says what it expected and what it saw."""

from __future__ import annotations

import pytest

from emulator import waiting
from emulator.errors import ConvergeTimeout, RocelabError
from emulator.waiting import WaitTimeout, timeout_message, wait_until


def test_returns_the_predicates_first_true_value():
    answers = iter([None, 0, "", {"ok": 1}])
    assert wait_until(lambda: next(answers), 5, 0.001, what="never") == {"ok": 1}


def test_a_timeout_says_what_did_not_happen_and_what_was_seen():
    with pytest.raises(WaitTimeout, match=r"^the socket did not appear within 0.05 s: "
                                          r"no engine\.sock$") as e:
        wait_until(lambda: False, 0.05, 0.01, what="the socket did not appear",
                   seen=lambda: "no engine.sock")
    assert isinstance(e.value, RocelabError)  # one line and an exit code in the CLI


def test_the_caller_picks_the_typed_error_its_exit_code_needs():
    with pytest.raises(ConvergeTimeout, match="lab x not healthy within 0.02 s"):
        wait_until(lambda: False, 0.02, 0.01, what="lab x not healthy", error=ConvergeTimeout)


class Clock:
    """time.monotonic and time.sleep for wait_until: a sleep advances the clock by exactly
    what was asked, so a test reads the loop's schedule, not how busy the CPU is."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(waiting, "time", fake)
    return fake


def test_it_looks_once_more_at_the_deadline_and_never_sleeps_past_it(clock):
    calls = []
    with pytest.raises(WaitTimeout):
        wait_until(lambda: calls.append(clock.now), 0.1, 10, what="x")
    # the first look, and the last at the deadline: one sleep of what was left, not 10 s
    assert calls == [100.0, pytest.approx(100.1)] and clock.sleeps == [pytest.approx(0.1)]


def test_a_predicate_that_raises_ends_the_wait_at_once(clock):
    def dead() -> bool:
        raise RocelabError("it exited")

    with pytest.raises(RocelabError, match="it exited"):
        wait_until(dead, 10, 0.01, what="x")
    assert clock.sleeps == []


def test_zero_timeout_still_looks_once():
    assert wait_until(lambda: 7, 0, what="x") == 7
    assert timeout_message("x not up", 1.5) == "x not up within 1.5 s"
