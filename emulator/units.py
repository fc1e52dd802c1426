"""Sizes, rates and times as people write them: 64MiB, 150KB, 400G, 100M, 300us."""

from __future__ import annotations

import re

from .errors import RocelabError

SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)B?\s*$", re.IGNORECASE)


def parse_size(text: str | int, field: str = "--size") -> int:
    """'64MiB' -> 67108864, '150KB' -> 150000, '4096' -> 4096."""
    if isinstance(text, int):
        return text
    m = SIZE_RE.match(text)
    if not m:
        raise RocelabError(f"{field}: {text!r} is not a size like 64MiB, 150KB or 4096")
    number, unit, binary = float(m.group(1)), m.group(2).upper(), m.group(3)
    size = int(number * (1024 if binary else 1000) ** " KMGT".index(unit or " "))
    if size <= 0:
        raise RocelabError(f"{field}: must be positive (got {text!r})")
    return size


TIME_RE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:e-?\d+)?)\s*(ns|us|µs|ms|s)?\s*$", re.IGNORECASE)
TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, None: 1.0}


def parse_time(text: str | float | int, field: str = "time") -> float:
    """'300us' -> 0.0003, '4us' -> 4e-06, 0.5 -> 0.5 (seconds)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        m = TIME_RE.match(str(text))
        if not m:
            raise RocelabError(f"{field}: {text!r} is not a time like 300us, 4us, 1.5ms or 2s")
        value = float(m.group(1)) * TIME_UNITS[m.group(2) and m.group(2).lower()]
    if value <= 0:
        raise RocelabError(f"{field}: must be positive (got {text!r})")
    return value
