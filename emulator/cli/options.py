"""Options shared by the commands that move data (transfer, kv)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .. import outfile
from ..engine.job import DEFAULT_MTU, MAX_EVS, ROCE_MTUS, TRANSPORTS, Op
from ..outfile import OutputError
from ..units import UnitError, parse_duration, parse_size, parse_speed


class Quantity(click.ParamType):
    """A size, speed or duration option parsed by units.py when the command line is read:
    a bad value is a usage error (exit 64) before anything else happens."""

    def __init__(self, name: str, parse: Callable[[str, str], Any]):
        self.name, self._parse = name, parse

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            self._parse(value, "")
        except UnitError as e:
            self.fail(str(e), param, ctx)
        return value


SIZE = Quantity("size", parse_size)
SPEED = Quantity("speed", parse_speed)
DURATION = Quantity("duration", lambda v, f: parse_duration(v, f))


def _mtu(ctx: click.Context, param: click.Parameter, value: int) -> int:
    if value not in ROCE_MTUS:
        raise click.BadParameter(f"must be one of {', '.join(map(str, ROCE_MTUS))} (got {value})")
    return value


def writable_out(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--out must be a directory this user can create or write, checked before anything runs
    (a run that cannot save its results at the end has lost them); nothing is created here.
    os.access alone says yes to root everywhere: outfile.check_dir also refuses a directory,
    or a symlink on the way, that belongs to another user."""
    if value is None:
        return value
    try:
        outfile.check_dir(value)
    except OutputError as e:
        raise click.BadParameter(str(e)) from None
    p = Path(value).absolute()
    ancestor = next(a for a in (p, *p.parents) if a.exists())
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise click.BadParameter(f"{value}: cannot write in {ancestor}")
    return value


def check_transport(op: str, transport: str) -> None:
    """--transport mrc moves data by RDMA WRITE only: --op read with it is a usage error."""
    if transport == "mrc" and op != Op.WRITE.value:
        raise click.UsageError("--transport mrc: RDMA WRITE only (MRC has no READ); "
                               "use --op write")


def engine_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--op, --transport, --evs, --qps, --mtu and --out, in that order on the command line
    help."""
    for option in reversed((
        click.option("--op", type=click.Choice([o.value for o in Op]), default="write",
                     show_default=True, help="write: prefill pushes; read: decode pulls (NIXL style)."),
        click.option("--transport", type=click.Choice(TRANSPORTS), default="rc", show_default=True,
                     help="rc: RoCEv2 RC queue pairs (--qps); mrc: one multipath connection "
                          "spraying over --evs entropy values (WRITE only; docs/mrc.md)."),
        click.option("--evs", default=64, show_default=True, type=click.IntRange(1, MAX_EVS),
                     help=f"MRC: entropy values (paths) per plane, 1..{MAX_EVS}."),
        click.option("--qps", default=1, show_default=True, type=click.IntRange(1, 64),
                     help="Queue pairs per transfer."),
        click.option("--mtu", default=DEFAULT_MTU, show_default=True, callback=_mtu,
                     help="RoCE path MTU: 256, 512, 1024, 2048 or 4096."),
        click.option("--out", type=click.Path(file_okay=False), callback=writable_out,
                     help="Also write DIR/results.json, plots and report.md/report.html."),
    )):
        f = option(f)
    return f


DEFAULT_MAX_DURATION = "10m"  # the engine's own transfer timeout until now: one bound, two uses


def max_duration_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """--max-duration: the longest (wall) a transfer or one handoff may take. One that
    cannot finish within it (its bytes at --rate, or at a shaped lab's line rate) is
    refused before it starts (exit 64); one still running then fails (exit 8)."""
    return click.option(
        "--max-duration", default=DEFAULT_MAX_DURATION, show_default=True,
        type=Quantity("duration", lambda v, f: parse_duration(v, f, positive=True)),
        help="Longest a transfer (kv: each handoff) may take, wall time (e.g. 10m, 1h, at "
             "most 7 days): refused up front if its size at --rate or at the lab's shaped "
             "line rate cannot finish in it, failed if still running then.")(f)
