"""An experiment's `expect:` lines, checked against its results (pure).

    lossless_drops == 0            a value compared with a literal (== != < <= > >=)
    steady.jain >= 0.9
    flows.*.integrity_ok           no operator: the value must be true
    flows.p1.handoff_p99_s < 2     list items by name (or index); `*`: every item or key

A path that names nothing fails, saying so; with `*` every value must pass.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<=": operator.le, ">=": operator.ge,
    "<": operator.lt, ">": operator.gt}
EXPR = re.compile(r"^\s*([A-Za-z0-9_.*\-]+)\s*(?:(==|!=|<=|>=|<|>)\s*(\S.*?))?\s*$")


@dataclass(frozen=True)
class Expect:
    text: str
    path: tuple[str, ...]
    op: str | None = None
    value: Any = None


def parse(text: str) -> Expect:
    """'steady.jain >= 0.9' -> Expect; ValueError saying what is allowed."""
    m = EXPR.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not PATH [OP VALUE] (e.g. `steady.jain >= 0.9`, "
                         f"`flows.*.integrity_ok`); OP is one of {' '.join(OPS)}")
    path, op, raw = m.groups()
    try:
        value = _literal(raw) if raw is not None else None
    except yaml.YAMLError:
        raise ValueError(f"{text!r}: {raw!r} is not a value (a number, true, false, null "
                         "or a word) after PATH [OP VALUE]") from None
    if op in ("<", "<=", ">", ">=") and not isinstance(value, (int, float)):
        raise ValueError(f"{text!r}: {op} needs a number (got {raw!r})")
    return Expect(str(text).strip(), tuple(path.split(".")), op, value)


def _literal(raw: str) -> Any:
    """A number as Python reads it (YAML 1.1 takes 1e15 for a string), else YAML's scalar."""
    for number in (int, float):
        try:
            return number(raw)
        except ValueError:
            pass
    return yaml.safe_load(raw)


def lookup(data: Any, path: tuple[str, ...], prefix: str = "") -> list[tuple[str, Any]]:
    """Every (dotted path, value) the path names; a missing step yields (path, KeyError)."""
    if not path:
        return [(prefix, data)]
    head, rest = path[0], path[1:]
    here = f"{prefix}.{head}" if prefix else head
    if isinstance(data, list):
        names = [str(x.get("name", i)) if isinstance(x, dict) else str(i) for i, x in enumerate(data)]
        picked = [(n, x) for i, (n, x) in enumerate(zip(names, data))
                  if head == "*" or n == head or (head.isdigit() and i == int(head))]
    elif isinstance(data, dict):
        picked = [(str(k), v) for k, v in data.items() if head in ("*", str(k))]
    else:
        picked = []
    if not picked:
        return [(here, KeyError(here))]
    return [hit for name, item in picked
            for hit in lookup(item, rest, f"{prefix}.{name}" if prefix else name)]


def evaluate(results: dict[str, Any], exp: Expect) -> dict[str, Any]:
    """{"expect", "ok", "values": {path: value}, "problem"} for one line."""
    hits = lookup(results, exp.path)
    values, bad = {}, []
    for path, value in hits:
        if isinstance(value, KeyError):
            bad.append(f"no value at {path}")
            continue
        values[path] = value
        if not _holds(exp, value):
            bad.append(f"{path} = {value!r}")
    return {"expect": exp.text, "ok": not bad, "values": values,
            "problem": "; ".join(bad) or None}


def _holds(exp: Expect, value: Any) -> bool:
    if exp.op is None:
        return value is True
    try:
        return bool(OPS[exp.op](value, exp.value))
    except TypeError:  # None < 2: a value that is missing in this run
        return False
