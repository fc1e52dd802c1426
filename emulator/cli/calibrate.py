from __future__ import annotations

import json
import os
import platform
import sys

import click

from .. import calibration, lab
from ..errors import ExitCode, RocelabError
from ..experiment import headroom, ladder
from .names import LAB
from .progress import err_console, interrupt_on_sigterm, progress


def _rates(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    """--rates 100M,200M,400M: each a rate, checked before anything is built (exit 64)."""
    try:
        return headroom.check_rates(value.split(","))
    except RocelabError as e:  # the rate grammar's one-line error, as a usage error (64)
        raise click.BadParameter(str(e).removeprefix("--rates: "), ctx, param) from None


@click.command("calibrate")
@click.option("--rates", default=",".join(headroom.LADDER), show_default=True, callback=_rates,
              help="The max_link_rates to try, comma-separated; the lowest is the baseline.")
@click.option("--name", type=LAB, default="calibrate", show_default=True,
              help="Lab name for the runs (one at a time, taken down after each).")
@click.option("--no-record", is_flag=True, help="Do not record the result for `up` to read.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def command(rates: list[str], name: str, no_record: bool, as_json: bool) -> None:
    """Find the highest max_link_rate at which this machine keeps the incast's fidelity.

    Runs experiments/incast.yaml at each rate, lowest first (flows scaled with the rate,
    25-50 s each with its lab), and stops at the first that breaks. Records the answer in the run
    root (calibration.json), where `up` reads it to warn about labs shaped faster.
    Exits 11 if not even the lowest rate holds.

    Example: rocelab calibrate --rates 100M,200M,400M,1G
    """
    lab.require_root()
    interrupt_on_sigterm()  # a killed calibration still takes its lab down
    with progress(f"calibrate {','.join(rates)}") as update:
        found = headroom.search(rates, lambda r: ladder.measure(r, name, update), update)
    result = found.to_json()
    if not no_record:
        where = calibration.save(result, {"cpus": os.cpu_count(), "kernel": platform.release()})
        result["recorded"] = str(where)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        _print(found, result.get("recorded"))
    if found.holds is None:
        sys.exit(ExitCode.EXPECTATION_FAILED)


def _print(found: headroom.Ladder, recorded: str | None) -> None:
    for r in found.rungs:
        f = r.figures
        err_console.print(
            f"{f.rate:>6}  D = {f.dilation:<6g} {'holds ' if r.holds else 'breaks'}  "
            f"bottleneck {_pct(f.utilisation)}, Jain {_num(f.jain)}, queue p50/p90/max "
            f"{_kb(f.queue_p50)}/{_kb(f.queue_p90)}/{_kb(f.queue_max)} KB, {f.pauses} pauses, "
            f"{f.drops} drops" + (f" ({'; '.join(r.problems)})" if r.problems else ""),
            soft_wrap=True, markup=False)
    best = found.holds
    if best is None:
        click.echo(f"no rate holds on this machine (lowest tried: {found.rungs[0].figures.rate})")
    else:
        click.echo(f"this machine holds max_link_rate {best.figures.rate} "
                   f"(D = {best.figures.dilation:g} for the incast's 400G links: "
                   f"{best.figures.real_per_wall * 1e3:.3g} ms real per wall second)")
    if recorded:
        click.echo(f"recorded in {recorded}: `rocelab up` warns about labs shaped faster")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _kb(v: float | None) -> str:
    return "-" if v is None else f"{v / 1e3:.0f}"
