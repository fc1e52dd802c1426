from __future__ import annotations

import json
from dataclasses import asdict

import click

from .. import lab
from .names import LAB


@click.command("down")
@click.argument("name", required=False, type=LAB)
@click.option("--all", "all_labs", is_flag=True, help="Remove every rocelab lab on this machine.")
@click.option("--json", "as_json", is_flag=True, help="What was removed, per lab, as JSON.")
def command(name: str | None, all_labs: bool, as_json: bool) -> None:
    """Remove a lab (or --all): processes, namespaces, run dir. Idempotent.

    Works from kernel state alone, even after a crash.
    Example: rocelab down clos-2x4
    """
    if (name is not None) == all_labs:  # "" is a (bad) name, not "none given"
        raise click.UsageError("give a lab name or --all (not both)")
    results = lab.down_all() if all_labs else [lab.down(name)]  # type: ignore[arg-type]
    if as_json:
        click.echo(json.dumps([asdict(r) | {"found": r.found} for r in results], indent=2))
        return
    for r in results:
        what = (f"{r.processes} processes, {r.namespaces} namespaces"
                + (", run dir" if r.run_dir else "")) if r.found else "nothing to remove"
        click.echo(f"lab {r.lab}: {what}")
        for note in r.notes:  # the neighbour limits: a value left as it was, and why
            click.echo(f"rocelab: warning: {note}", err=True)
    if all_labs and not results:
        click.echo("no rocelab labs on this machine")
