"""Sizes and rates as people write them: 64MiB, 150KB, 400G, 100M."""

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
