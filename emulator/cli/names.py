"""The click types of every lab and node name a command takes (names.py's rules).

A bad name is a bad command line (exit 64) before root, the run root or the
kernel is asked anything: `rocelab down ../victim` never reaches a path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ..errors import BadNameError
from ..names import check_lab, check_node


class Name(click.ParamType):
    def __init__(self, name: str, check: Callable[[object, str], str]):
        self.name, self._check = name, check

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return self._check(value, "")
        except BadNameError as e:
            self.fail(str(e).removeprefix(": "), param, ctx)


LAB = Name("lab", check_lab)
NODE = Name("node", check_node)
