from __future__ import annotations

import json
import time

import click

from .. import lab, state
from ..status import UNTIL, verdict, wait_until
from .names import LAB
from .progress import progress


@click.command("wait")
@click.argument("name", required=False, type=LAB)
@click.option("--until", "until", type=click.Choice(UNTIL), default="converged", show_default=True,
              help="converged: routing settled to what the plan and the active faults require; "
                   "healthy: nothing failed, full ECMP, full reachability.")
@click.option("--timeout", default=60.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds to wait before giving up (exit 6).")
@click.option("--json", "as_json", is_flag=True, help="Print the final status as JSON.")
def command(name: str | None, until: str, timeout: float, as_json: bool) -> None:
    """Block until the lab is converged (or healthy); exit 6 if it is not within --timeout.

    For scripts and CI: `rocelab up ... && rocelab fail ... && rocelab wait LAB`.

    Example: rocelab wait clos-2x4 --until healthy --timeout 30
    """
    lab.require_root()
    plan = state.lab_plan(state.resolve_lab(name))
    t0 = time.monotonic()
    with progress(f"waiting for {plan.lab} to be {until}") as update:
        st = wait_until(plan, until, timeout, update)
    if as_json:
        click.echo(json.dumps(st | {"waited_s": round(time.monotonic() - t0, 3)}, indent=2))
    else:
        click.echo(f"lab {plan.lab} {verdict(st)} (waited {time.monotonic() - t0:.2f} s)")
