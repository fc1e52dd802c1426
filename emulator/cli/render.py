from __future__ import annotations

from pathlib import Path

import click

from .. import lab, render


@click.command("render")
@click.argument("topology", type=click.Path(dir_okay=False))
@click.option("-o", "--out", required=True, type=click.Path(file_okay=False),
              help="Directory for plan.json and <node>/<daemon>.conf: new, empty, or an earlier "
                   "render (replaced). Anything else is refused.")
@click.option("--name", help="Lab name (default: the file's `name:`).")
def command(topology: str, out: str, name: str | None) -> None:
    """Write every node's config and the resolved plan (JSON). No root needed.

    DIR then holds exactly this render (ready to diff against golden files): an
    earlier rocelab render there, of any topology, is replaced; a directory holding
    anything else is refused and left as it was.

    Example: rocelab render topologies/clos-2x4.yaml -o /tmp/clos
    """
    _, plan, rendered = lab.load_topology(topology, name)
    files = render.write(rendered, Path(out))
    click.echo(f"lab {plan.lab}: wrote {len(files)} files to {out}")
