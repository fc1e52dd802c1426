from __future__ import annotations

import json
from pathlib import Path

import click

from .. import lab, save, state
from .names import LAB


@click.command("save")
@click.argument("name", required=False, type=LAB)
@click.option("-o", "--out", required=True, type=click.Path(file_okay=False),
              help="Directory for topology.yaml and <router>/frr.conf: new, empty, or an "
                   "earlier save (replaced). Anything else is refused.")
@click.option("--json", "as_json", is_flag=True, help="The files written, as JSON.")
def command(name: str | None, out: str, as_json: bool) -> None:
    """Save a running lab's FRR configuration as it runs now (live vtysh edits included).

    Writes DIR/<router>/frr.conf (each router's running configuration) and
    DIR/topology.yaml (the lab's topology with `frr_configs: .`), so that
    `rocelab up DIR/topology.yaml` rebuilds the lab running those configurations.
    LAB may be omitted when one lab runs.

    Example: rocelab save clos-2x4 -o saved/ && rocelab up saved/topology.yaml --name again
    """
    lab.require_root()
    saved = save.save(state.resolve_lab(name), Path(out))
    if as_json:
        click.echo(json.dumps({"lab": saved.lab, "out": str(saved.out), "routers": saved.routers,
                               "files": [str(f) for f in saved.files],
                               "topology": str(saved.out / save.TOPOLOGY)}, indent=2))
        return
    click.echo(f"lab {saved.lab}: saved the running configuration of {len(saved.routers)} "
               f"routers and topology.yaml to {out}")
    click.echo(f"rebuild: rocelab up {saved.out / save.TOPOLOGY} --name NAME")
