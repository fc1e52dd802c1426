"""Quantities as people write them, one grammar each: sizes, speeds, durations.

    size      64MiB, 150KB, 4096         -> bytes (int)
    speed     400G, 100M, 25000Mbit      -> bits per second (int)
    duration  300us, 1.5ms, 2s, 1m, 1h, 0.5 -> seconds (float; a bare number is seconds)

Every parser raises `UnitError` naming the field and what is allowed. It is
both a `RocelabError` (the CLI prints it as one line) and a `ValueError`
(a pydantic validator may let it through as the field's error).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from .errors import RocelabError


class UnitError(RocelabError, ValueError):
    """A size, speed or duration that does not parse (or is out of range)."""


MAX_SIZE = 2**50  # 1 PiB: far beyond any buffer or transfer, and a finite int
MAX_SPEED = 10**14  # 100 Tbit/s
MAX_DURATION_S = 7 * 86400  # a week: far beyond any run or timer, and a finite sleep


def _short(text: object, limit: int = 24) -> str:
    """repr(text), cut to `limit` characters: an error line stays one short line."""
    r = repr(text)
    return r if len(r) <= limit else r[: limit - 4] + "...'"


def _fail(field: str | None, problem: str) -> UnitError:
    return UnitError(f"{field}: {problem}" if field else problem)


SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)B?\s*$", re.IGNORECASE)


def parse_size(text: str | int, field: str | None = "--size") -> int:
    """'64MiB' -> 67108864, '150KB' -> 150000, '4096' -> 4096."""
    if isinstance(text, int) and not isinstance(text, bool):
        scaled = Fraction(text)
    else:
        m = SIZE_RE.match(str(text))
        if not m:
            raise _fail(field, f"{text!r} is not a size like 64MiB, 150KB or 4096")
        unit, binary = m.group(2).upper(), m.group(3)  # exact: 1.1K is 1100, not 1100.0000001
        scaled = Fraction(m.group(1)) * (1024 if binary else 1000) ** " KMGT".index(unit or " ")
    if not scaled < MAX_SIZE:
        raise _fail(field, f"must be below 1 PiB (got {_short(text)})")
    if scaled <= 0:
        raise _fail(field, f"must be positive (got {text!r})")
    if scaled.denominator != 1:  # 1.5 would move 1 byte, 0.3KiB 307: say so, never round
        raise _fail(field, f"must be a whole number of bytes (got {_short(text)}: "
                           f"{float(scaled):g} bytes)")
    return int(scaled)


SPEED_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT])(?:bit|bps|b)?\s*$", re.IGNORECASE)
SPEED_UNITS = {"K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def parse_speed(text: str, field: str | None = "speed") -> int:
    """'400G' -> 400_000_000_000 bits per second; positive."""
    m = SPEED_RE.match(str(text))
    if not m:
        raise _fail(field, f"{text!r} is not a rate like 100G, 400G or 25000M")
    scaled = float(m.group(1)) * SPEED_UNITS[m.group(2).upper()]
    if not scaled < MAX_SPEED:  # also inf: hundreds of digits
        raise _fail(field, f"must be below 100T (got {_short(text)})")
    bps = int(scaled)
    if bps <= 0:
        raise _fail(field, f"must be greater than zero (got {text!r})")
    return bps


PERCENT_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%?\s*$")


def parse_percent(text: str | float, field: str | None = "percent") -> float:
    """'1.5%', '1.5' or 1.5 -> 1.5; above 0 and at most 100."""
    m = PERCENT_RE.match(str(text))
    if not m:
        raise _fail(field, f"{_short(str(text))!r} is not a percentage like 1% or 0.5%")
    value = float(m.group(1))
    if not 0 < value <= 100:
        raise _fail(field, f"must be above 0% and at most 100% (got {text})")
    return value


def speed_or_zero(text: str) -> int:
    """'100G' -> bits per second; 0 if the text is not a positive speed."""
    try:
        return parse_speed(text, None)
    except UnitError:
        return 0


DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:e-?\d+)?)\s*(ns|us|µs|ms|s|m|h)?\s*$", re.IGNORECASE)
DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0,
                  None: 1.0}


def parse_duration(value: str | float | int, field: str | None = "duration",
                   positive: bool = False) -> float:
    """'300us' -> 0.0003, '2s' -> 2.0, '1m' -> 60.0, 0.5 -> 0.5 (seconds); never negative,
    and with `positive` never zero."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        m = DURATION_RE.match(str(value))
        if not m:
            raise _fail(field, f"{value!r} is not a duration like 300us, 500ms, 2s or 1m")
        seconds = float(m.group(1)) * DURATION_UNITS[m.group(2) and m.group(2).lower()]
    if not math.isfinite(seconds) or seconds > MAX_DURATION_S:  # 1e400 is inf, .nan passes <
        raise _fail(field, f"must be a finite duration of at most 7 days ({MAX_DURATION_S} s)")
    if seconds < 0 or (positive and seconds == 0):
        raise _fail(field, f"must be {'positive' if positive else 'zero or more'} (got {value!r})")
    return seconds


class Dilation(float):
    """Time dilation D as a number with its arithmetic: a shaped lab runs D times slower
    than the fabric it emulates. Bandwidth x time = bytes is invariant, so durations
    scale by D and rates by 1/D; sizes do not change. D = 1 on an unshaped lab."""

    def real_s(self, wall_s: float) -> float:
        """A measured (wall) duration in real-equivalent time."""
        return wall_s / self

    def wall_s(self, real_s: float) -> float:
        """A protocol timer (real) stretched for the lab."""
        return real_s * self

    def real_bps(self, wall_bps: float) -> float:
        """A measured (wall) rate at the real-equivalent link speed."""
        return wall_bps * self

    def wall_bps(self, real_bps: float) -> float:
        """A real-equivalent rate as the lab paces it."""
        return real_bps / self
