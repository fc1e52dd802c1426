from __future__ import annotations

import json

import click

from .. import faults, lab, state
from .fail import TIMEOUT, describe, target
from .names import LAB
from .progress import progress


@click.command("heal")
@click.argument("name", type=LAB)
@click.argument("what", nargs=-1)
@click.option("--all", "heal_all", is_flag=True,
              help="Heal every fault, recorded or only found in the kernel (after a crash).")
@click.option("--no-wait", is_flag=True, help="Return at once instead of waiting for routing to converge.")
@click.option("--timeout", default=30.0, show_default=True, type=TIMEOUT,
              help="Seconds to wait for convergence (exit 6 if it does not).")
@click.option("--json", "as_json", is_flag=True, help="Print the recorded event as JSON.")
def command(name: str, what: tuple[str, ...], heal_all: bool, no_wait: bool, timeout: float,
            as_json: bool) -> None:
    """Heal a fault: WHAT is `link A B`, `node N` or `plane K`; or --all.

    Waits until every router's FIB is whole again (full ECMP) and says how
    long it took.

    Example: rocelab heal clos-2x4 --all
    """
    if bool(what) == heal_all:
        raise click.UsageError("give link A B, node N, plane K, or --all (one of them)")
    lab.require_root()
    plan = state.lab_plan(name)
    fault = None if heal_all else target(plan, what)
    if no_wait:
        event = faults.heal(plan, fault)
    else:
        with progress("waiting for routing to converge") as update:
            event = faults.heal_settled(plan, fault, timeout, update)
    if as_json:
        click.echo(json.dumps(event, indent=2))
        return
    names = [faults.Fault.from_json(r).name for r in event["healed"]]
    click.echo(f"healed {', '.join(names) or 'nothing (no active faults)'} at {event['iso']}")
    if "convergence" in event and names:
        click.echo(describe(event["convergence"]))
