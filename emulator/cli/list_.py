from __future__ import annotations

import json
import os
from pathlib import Path

import click

from .. import lab
from ..tools.labs import LabRow, format_age, list_labs


@click.command("list")
@click.option("--json", "as_json", is_flag=True,
              help="A JSON list: name, topology, routers, hosts, namespaces, processes, faults, "
                   "created, age_s, health, detail.")
def command(as_json: bool) -> None:
    """Every lab on this machine: topology, routers/hosts, age and a cheap health word.

    healthy: no fault in force, every router's kernel FIB has the full ECMP widths;
    converged: recorded faults are in force and routed around; not-converged;
    starting; broken: traces without a state file, or namespaces/daemons missing.
    Exits 0 even when no lab runs. `rocelab status LAB` is the thorough check.

    Example: rocelab list --json | jq '.[] | {name, health}'
    """
    lab.require_root()
    rows = list_labs()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    elif not rows:
        click.echo("no labs")
    else:
        for line in table(rows):
            click.echo(line)


def _topology(path: str | None) -> str:
    """The topology file, relative to the current directory when it is below it."""
    if not path:
        return "-"
    try:
        return str(Path(path).relative_to(Path(os.getcwd())))
    except ValueError:
        return path


def table(rows: list[LabRow]) -> list[str]:
    cells = [("LAB", "TOPOLOGY", "ROUTERS", "HOSTS", "AGE", "HEALTH")]
    for r in rows:
        health = r["health"] + (f" ({r['detail']})" if r["detail"] else "")
        cells.append((r["name"], _topology(r["topology"]),
                      "-" if r["routers"] is None else str(r["routers"]),
                      "-" if r["hosts"] is None else str(r["hosts"]), format_age(r["age_s"]), health))
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]) - 1)]
    return ["  ".join(c[i].ljust(widths[i]) for i in range(len(widths))) + "  " + c[-1] for c in cells]
