"""Progress lines without a terminal (CI logs, `make demo > log`): whole, wrapped, never cut mid-word."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from emulator.cli import progress as prog

# What `up` reports while the FIB fills (converge.wait joins the failing checks' summaries).
FIB = ("fib: spine1 has 8 host prefixes without 1 next hops (e.g. 10.2.0.0/31: 0); spine2 has 8 host "
       "prefixes without 1 next hops (e.g. 10.2.0.0/31: 0); leaf1 has 6 host prefixes without 2 next "
       "hops (e.g. 10.2.1.0/31: 0) (+3 more) | bgp: leaf1 0/2 sessions Established")


@pytest.fixture
def log(monkeypatch):
    """stderr as a log file: not a terminal."""
    buf = io.StringIO()
    monkeypatch.setattr(prog, "err_console", Console(file=buf, highlight=False))
    return buf


def printed(msgs: list[str], log: io.StringIO) -> list[str]:
    assert not prog.err_console.is_terminal
    with prog.progress("up topologies/clos-2x4.yaml") as update:
        for m in msgs:
            update(m)
    return log.getvalue().splitlines()


def words(text: str) -> list[str]:
    return re.sub(r"\[\s*\d+\.\ds\]", " ", text).replace("|", " ").split()


@pytest.mark.parametrize("columns", [None, "80"])
def test_a_long_progress_line_is_printed_whole_and_wrapped_at_its_separators(log, monkeypatch, columns):
    if columns:
        monkeypatch.setenv("COLUMNS", columns)
    else:
        monkeypatch.delenv("COLUMNS", raising=False)
    lines = printed(["creating 14 namespaces and 16 links", FIB], log)
    assert lines[0].endswith("] creating 14 namespaces and 16 links")
    fib = lines[1:]
    assert re.match(r"\[\s*\d+\.\ds\] fib: spine1 has 8 host prefixes", fib[0])
    assert words("\n".join(fib)) == words(FIB)  # every word, none cut or dropped
    width = int(columns or prog.LOG_COLUMNS)
    assert all(len(line) <= width for line in fib), fib
    assert all(line.startswith(" " * 9) and not line[9].isspace() for line in fib[1:]), fib
    if not columns:  # wide enough: one problem per line, each check starting its own
        assert [line.strip() for line in fib[1:]] == [
            "spine2 has 8 host prefixes without 1 next hops (e.g. 10.2.0.0/31: 0);",
            "leaf1 has 6 host prefixes without 2 next hops (e.g. 10.2.1.0/31: 0) (+3 more)",
            "bgp: leaf1 0/2 sessions Established"]


def test_a_short_message_stays_one_line(log, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    lines = printed(["routing converged; checking host reachability"], log)
    assert len(lines) == 1 and lines[0].endswith("] routing converged; checking host reachability")


@pytest.mark.parametrize("width", [30, 60, 100, 150])
def test_the_spinner_text_is_cut_at_a_word_boundary(width):
    short = prog.shorten(FIB, width)
    assert len(short) <= width and short.endswith(" ...")
    kept = short.removesuffix(" ...")
    assert FIB.startswith(kept) and FIB[len(kept)] in " ;|", short  # ends where a word ends
    assert prog.shorten("fib: ok", width) == "fib: ok"


def test_a_word_longer_than_the_line_is_left_whole():
    long = "x" * 50
    assert prog.wrap(f"fib: {long} y", 30) == ["fib:", long, "y"]
