"""Options shared by the commands that move data (transfer, kv)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ..engine.job import DEFAULT_MTU, Op


def engine_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--op, --qps, --mtu and --out, in that order on the command line help."""
    for option in reversed((
        click.option("--op", type=click.Choice([o.value for o in Op]), default="write",
                     show_default=True, help="write: prefill pushes; read: decode pulls (NIXL style)."),
        click.option("--qps", default=1, show_default=True, help="Queue pairs per transfer."),
        click.option("--mtu", default=DEFAULT_MTU, show_default=True, help="RoCE path MTU."),
        click.option("--out", type=click.Path(file_okay=False),
                     help="Also write DIR/results.json, plots and report.md/report.html."),
    )):
        f = option(f)
    return f
