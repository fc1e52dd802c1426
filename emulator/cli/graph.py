from __future__ import annotations

import json
from pathlib import Path

import click

from .. import lab
from ..errors import RocelabError
from ..report import data
from .names import LAB


@click.command("graph")
@click.argument("topology_file", metavar="TOPOLOGY", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="PNG or SVG file (by suffix; default: LAB.png).")
@click.option("--results", type=click.Path(exists=True, dir_okay=False),
              help="Colour links by the traffic in a results.json (run, transfer or kv --out).")
@click.option("--name", type=LAB, help="Lab name (default: the topology's).")
@click.option("--title", help="Title (default: the lab, or the run of --results).")
def command(topology_file: str, output: str | None, results: str | None, name: str | None,
            title: str | None) -> None:
    """Draw the topology: spines, leaves, hosts, link speeds; the hottest links coloured.

    No root needed. Example: rocelab graph topologies/clos-2x4-cc.yaml -o fabric.svg
    """
    _, plan, _ = lab.load_topology(topology_file, name)
    path = Path(output or f"{plan.lab}.png")
    if path.suffix.lower() not in (".png", ".svg"):
        raise RocelabError(f"--output {path}: the picture must be a .png or .svg file")
    if not path.absolute().parent.is_dir():  # say so before drawing, naming the option
        raise RocelabError(f"--output {path}: no directory {path.absolute().parent}")
    load, duration = None, 0.0
    if results:
        try:
            d = data.load(json.loads(Path(results).read_text()))
        except (OSError, ValueError, KeyError) as e:
            raise RocelabError(f"--results {results}: not a rocelab results.json ({e})") from None
        load, duration, title = d.link_load() or None, d.duration_s, title or d.title
    from ..report import topology  # matplotlib: imported only when drawing

    topology.draw(plan, path, load, duration, title)
    coloured = f" (links coloured from {results})" if load else ""
    click.echo(f"lab {plan.lab}: wrote {path}{coloured}")
