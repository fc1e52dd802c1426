"""An experiment's `expect:` lines, checked against its results (pure).

    lossless_drops == 0            a value compared with a literal (== != < <= > >=)
    steady.jain >= 0.9
    flows.*.integrity_ok           no operator: the value must be true
    flows.p1.handoff_p99_s < 2     list items by name (or index); `*`: every item or key
    fabrics.l2.flows.kv1.interruption_s >= 10 * fabrics.l3.flows.kv1.interruption_s
                                   VALUE may be another PATH (with a dot, no `*`), times
                                   an optional NUMBER: it must name exactly one value

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
# VALUE as [NUMBER *] PATH: a path has a dot and starts with a letter (a lone word is a literal)
REF = re.compile(r"^(?:([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*\*\s*)?"
                 r"([A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]+)+)$")


@dataclass(frozen=True)
class Expect:
    text: str
    path: tuple[str, ...]
    op: str | None = None
    value: Any = None
    ref: tuple[str, ...] | None = None  # VALUE is this path's value ...
    factor: float = 1.0  # ... times this


def parse(text: str) -> Expect:
    """'steady.jain >= 0.9' -> Expect; ValueError saying what is allowed."""
    m = EXPR.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not PATH [OP VALUE] (e.g. `steady.jain >= 0.9`, "
                         f"`flows.*.integrity_ok`); OP is one of {' '.join(OPS)}")
    path, op, raw = m.groups()
    ref = REF.match(raw) if raw is not None else None
    if ref:
        factor, target = ref.groups()
        return Expect(str(text).strip(), tuple(path.split(".")), op, None,
                      tuple(target.split(".")), float(factor) if factor else 1.0)
    if raw is not None and "*" in raw:
        raise ValueError(f"{text!r}: after {op} give a literal or [NUMBER *] PATH, a path "
                         f"that names one value: no `*` wildcard, no other arithmetic (got {raw!r})")
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
    values: dict[str, Any] = {}
    bad: list[str] = []
    against, shown = exp.value, ""
    if exp.ref is not None:
        refs = lookup(results, exp.ref)
        ref_path, against = refs[0]
        if len(refs) != 1 or isinstance(against, KeyError):
            bad.append(f"no value at {ref_path}" if isinstance(against, KeyError)
                       else f"{'.'.join(exp.ref)} names {len(refs)} values, not one")
            return {"expect": exp.text, "ok": False, "values": values, "problem": "; ".join(bad)}
        if exp.factor != 1.0:
            against = _scaled(against, exp.factor)
            shown = f" (against {exp.factor:g} x {ref_path} = {_short(against)})"
        else:
            shown = f" (against {ref_path} = {_short(against)})"
    for path, value in lookup(results, exp.path):
        if isinstance(value, KeyError):
            bad.append(f"no value at {path}")
            continue
        values[path] = value
        if not _holds(exp, value, against):
            bad.append(f"{path} = {value!r}{shown}")
    if exp.ref is not None:
        values[ref_path] = refs[0][1]
    return {"expect": exp.text, "ok": not bad, "values": values,
            "problem": "; ".join(bad) or None}


def _scaled(value: Any, factor: float) -> Any:
    """factor x value, or the value itself when it is not a number (the comparison fails)."""
    return value * factor if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else value


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else repr(value)


def _holds(exp: Expect, value: Any, against: Any) -> bool:
    if exp.op is None:
        return value is True
    try:
        return bool(OPS[exp.op](value, against))
    except TypeError:  # None < 2: a value that is missing in this run
        return False
