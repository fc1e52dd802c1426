from __future__ import annotations

import json
from dataclasses import asdict

import click

from .. import lab
from .names import LAB
from .progress import reporter


@click.command("down")
@click.argument("name", required=False, type=LAB)
@click.option("--all", "all_labs", is_flag=True, help="Remove every rocelab lab on this machine.")
@click.option("--prefix", default=None, metavar="TEXT",
              help="With --all: only the labs whose name starts with TEXT.")
@click.option("--json", "as_json", is_flag=True, help="What was removed, per lab, as JSON.")
@click.option("--quiet", "-q", is_flag=True,
              help="No progress on stderr (processes stopped, namespaces removed so far).")
def command(name: str | None, all_labs: bool, prefix: str | None, as_json: bool,
            quiet: bool) -> None:
    """Remove a lab (or --all): processes, namespaces, run dir. Idempotent.

    Works from kernel state alone, even after a crash.
    Example: rocelab down clos-2x4
    """
    if (name is not None) == all_labs:  # "" is a (bad) name, not "none given"
        raise click.UsageError("give a lab name or --all (not both)")
    if prefix is not None and not (all_labs and prefix):
        raise click.UsageError("--prefix: a non-empty start of lab names, with --all")
    with reporter(quiet) as progress:
        results = (lab.down_all(prefix or "", progress) if all_labs
                   else [lab.down(name, progress)])  # type: ignore[arg-type]
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
        click.echo(f"no rocelab labs named {prefix}* on this machine" if prefix
                   else "no rocelab labs on this machine")
