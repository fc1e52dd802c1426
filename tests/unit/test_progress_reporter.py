"""emulator.progress: counted phases on a terminal (one line, rewritten) and in a log
(a line every few seconds), rendered exactly with a fake clock and a fake stream."""

from __future__ import annotations

import io
import sys
import threading

import pytest

from emulator import progress as pg
from emulator.errors import ExitCode, SettingError


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def reporter(tty: bool, every_s: float = 5.0, width: int = 80) -> tuple[pg.Reporter, Stream, Clock]:
    clock, stream = Clock(), Stream(tty)
    return pg.Reporter(stream, every_s=every_s, clock=clock, width=width, keep_alive=False), stream, clock


def test_eta_is_what_is_left_at_the_rate_seen_so_far():
    clock = Clock()
    p = pg.steps(lambda _: None, "bgp", 264, "routers", clock=clock)
    assert p.eta_s() is None  # nothing seen yet
    p.update(4)
    clock.t += 10
    assert p.eta_s() is None  # one sample: no rate yet
    p.update(24)  # 20 routers in 10 s: 2 a second, 240 left
    assert p.eta_s() == pytest.approx(120.0)
    p.update(264)
    assert p.eta_s() is None  # done


def test_the_text_counts_percent_detail_elapsed_and_eta():
    clock = Clock()
    p = pg.steps(lambda _: None, "BGP", 200, "routers converged", clock=clock)
    p.update(0)
    clock.t += 30
    p.update(50, "3100 prefixes missing")
    assert p.text() == "BGP: 50/200 routers converged (25%), 30 s, ETA 1m30s, 3100 prefixes missing"
    assert p.text(final=True) == "BGP: 50/200 routers converged (25%), in 30 s, 3100 prefixes missing"


def test_without_a_terminal_a_line_every_few_seconds_never_a_flood():
    r, out, clock = reporter(tty=False, every_s=5.0)
    r("starting FRR on 264 routers")
    p = r.phase("daemons", 264, "routers")
    for done in range(1, 265):  # one update every 1/16 s: 16.5 s in all
        clock.t += 0.0625
        p.update(done)
    p.end()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()  # plain text only
    assert lines[0] == "[   0.0s] starting FRR on 264 routers"
    assert [ln[:9] for ln in lines[1:]] == ["[   5.0s]", "[  10.0s]", "[  15.0s]", "[  16.5s]"]
    assert lines[1] == "[   5.0s] daemons: 80/264 routers (30%), 5 s, ETA 12 s"  # 79 in 4.94 s
    assert lines[-1] == "[  16.5s] daemons: 264/264 routers (100%), in 17 s"


def test_without_a_terminal_a_complete_count_is_said_once_by_the_last_line():
    r, out, clock = reporter(tty=False, every_s=1.0)
    with r.phase("daemons", 4, "routers started") as p:
        clock.t += 2
        p.update(4)  # all started: the phase is about to end
    assert out.getvalue().splitlines() == ["[   2.0s] daemons: 4/4 routers started (100%), in 2 s"]


def test_a_shorter_interval_writes_more_lines():
    r, out, clock = reporter(tty=False, every_s=1.0)
    p = r.phase("down", 100, "namespaces removed")
    for done in range(1, 101):
        clock.t += 0.125
        p.update(done)
    assert len(out.getvalue().splitlines()) == 12  # one a second for 12.5 s


def test_without_a_terminal_a_phase_shorter_than_the_interval_shows_nothing():
    r, out, clock = reporter(tty=False, every_s=5.0)
    with r.phase("daemons", 6, "routers") as p:
        for done in range(1, 7):
            clock.t += 0.5
            p.update(done)
    assert out.getvalue() == ""  # a small lab's up: its notes and the summary, no more


def test_without_a_terminal_a_stuck_phase_still_shows_a_line_every_interval():
    r, out, clock = reporter(tty=False, every_s=5.0)
    p = r.phase("routing", 264, "routers converged")
    for _ in range(40):  # 20 s, the count never moves
        clock.t += 0.5
        p.update(100, "fib: 3100 prefixes missing")
    assert out.getvalue().splitlines() == [
        f"[  {t:4.1f}s] routing: 100/264 routers converged (37%), {t:.0f} s, fib: 3100 prefixes missing"
        for t in (5.0, 10.0, 15.0, 20.0)]


def test_on_a_terminal_one_line_is_rewritten_in_place_then_cleared():
    r, out, clock = reporter(tty=True, width=60)
    r("starting FRR on 8 routers")
    p = r.phase("daemons", 8, "routers")
    clock.t += 1
    p.update(8)
    p.end()
    r.close()
    text = out.getvalue()
    assert "\n" not in text and "\x1b" not in text  # one line, \r only
    frames = text.split("\r")[1:]
    assert frames[0] == "starting FRR on 8 routers"
    assert frames[1] == "daemons: 0/8 routers (0%), 0 s"
    assert frames[2].startswith("daemons: 8/8 routers (100%), 1 s")
    assert frames[-2] == " " * len(frames[-3]) and frames[-1] == ""  # cleared at the end
    assert all(len(f) <= 59 for f in frames)


def test_a_shorter_status_line_is_padded_over_the_longer_one():
    r, out, _ = reporter(tty=True)
    long = "creating 1416 namespaces and 2640 links"
    r(long)
    r("short")
    assert out.getvalue().split("\r")[-1] == "short" + " " * (len(long) - 5)


def test_a_terminal_is_not_rewritten_more_often_than_tty_every():
    r, out, clock = reporter(tty=True)
    p = r.phase("reach", 1000, "pairs answered")
    for done in range(1, 321):  # 320 updates in 10 s
        clock.t += 0.03125
        p.update(done)
    assert out.getvalue().count("\r") == 1 + 80  # the start, then every 4th (1/8 s >= 0.1 s)


def test_a_long_status_line_is_cut_to_the_terminal_width():
    r, out, _ = reporter(tty=True, width=30)
    r("x" * 100)
    assert out.getvalue() == "\r" + "x" * 29


def test_a_plain_callable_gets_each_update_as_text():
    seen: list[str] = []
    clock = Clock()
    with pg.steps(seen.append, "rxe guests", 3, "booted", clock=clock) as p:
        p.advance()
        clock.t += 0.5
        p.advance()  # within LINES_EVERY_S of the last message: not sent
        clock.t += 0.5
        p.advance()
        clock.t += 1
        p.update(3)  # nothing changed: not sent
    assert seen == ["rxe guests: 1/3 booted (33%), 0 s", "rxe guests: 3/3 booted (100%), 1 s",
                    "rxe guests: 3/3 booted (100%), in 2 s"]


def test_an_interrupted_phase_says_so():
    seen: list[str] = []
    with pytest.raises(KeyboardInterrupt), pg.steps(seen.append, "down", 4, "namespaces") as p:
        p.update(1)
        raise KeyboardInterrupt
    assert seen[-1] == "down: 1/4 namespaces (25%), in 0 s, interrupted"


@pytest.mark.parametrize("text, every", [(None, 5.0), ("", 5.0), ("2", 2.0), ("0.5", 0.5)])
def test_the_log_interval_comes_from_the_environment(text, every):
    assert pg.every_from(text) == every


@pytest.mark.parametrize("text", ["0", "-1", "soon", "nan", "inf"])
def test_a_bad_log_interval_is_one_line_naming_the_setting(text):
    with pytest.raises(SettingError) as e:
        pg.every_from(text)
    assert str(e.value) == (f"ROCELAB_PROGRESS_EVERY={text!r}: must be a number of seconds > 0 "
                            "(default 5)")
    assert e.value.exit_code == ExitCode.USAGE


@pytest.mark.parametrize("s, text", [(0.4, "0 s"), (59, "59 s"), (61, "1m01s"), (3725, "1h02m")])
def test_durations_are_short(s, text):
    assert pg.duration(s) == text


def test_a_phase_waiting_on_one_long_step_still_shows_a_line_every_interval():
    r, out, clock = reporter(tty=False, every_s=5.0)
    p = r.phase("routing", 264, "routers converged")
    p.update(3, "fib: 9000 prefixes missing")
    for _ in range(12):  # one poll of a big fabric: 12 s without an update
        clock.t += 1
        r.tick()
    assert [ln[:9] for ln in out.getvalue().splitlines()] == ["[   5.0s]", "[  10.0s]"]
    assert out.getvalue().splitlines()[1] == (
        "[  10.0s] routing: 3/264 routers converged (1%), 10 s, fib: 9000 prefixes missing")
    p.end()
    r.tick()  # an ended phase is not shown again
    assert len(out.getvalue().splitlines()) == 3


def test_the_keep_alive_thread_stops_with_the_reporter():
    r = pg.Reporter(Stream(False), every_s=5.0)
    with r.phase("daemons", 2):
        pass
    ticker = r._ticker
    assert ticker is not None and ticker.is_alive()  # started with the first phase
    r.close()
    assert not ticker.is_alive()


def test_advances_from_many_threads_lose_no_count():
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between any two bytecodes: races show
    try:
        p = pg.steps(lambda _: None, "namespaces", 8000, "created")
        workers = [threading.Thread(target=lambda: [p.advance() for _ in range(2000)]) for _ in range(4)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert p.done == 8000
