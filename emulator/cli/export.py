from __future__ import annotations

import json
from pathlib import Path

import click

from .. import export, lab, render
from .names import LAB


@click.command("export")
@click.argument("topology", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(export.FORMATS), default="containerlab",
              show_default=True, help="What to export to.")
@click.option("-o", "--out", required=True, type=click.Path(file_okay=False),
              help="Directory for <lab>.clab.yml and configs/<node>/: new, empty, or an earlier "
                   "export (replaced). Anything else is refused.")
@click.option("--templates", type=click.Path(exists=True, file_okay=False),
              help="A directory of FRR templates (*.conf.j2, named as in frr-templates/) used "
                   "before the shipped ones.")
@click.option("--name", type=LAB, help="Lab name (default: the file's `name:`).")
@click.option("--router-image", default=export.ROUTER_IMAGE, show_default=True,
              help="Container image of the routers (FRR 8.4 or later).")
@click.option("--host-image", default=export.HOST_IMAGE, show_default=True,
              help="Container image of the hosts and l2 switches (needs iproute2).")
@click.option("--json", "as_json", is_flag=True, help="The files written, as JSON.")
def command(topology: str, fmt: str, out: str, templates: str | None, name: str | None,
            router_image: str, host_image: str, as_json: bool) -> None:
    """Export a lab to run beyond one machine: a containerlab topology. No root needed.

    DIR gets <lab>.clab.yml, and per node what its container binds:
    configs/<router>/frr.conf (integrated, interface addresses included) and
    daemons, configs/<host>/host.sh (addresses and routes), configs/<switch>/bridge.sh
    (bridging switches). Interfaces keep the lab's names. The congestion plane, the
    RoCE engine and rocelab's fault and status tooling do not carry over (docs/scale.md).

    Example: rocelab export topologies/clos-2x4.yaml -o /tmp/clab && cd /tmp/clab &&
    sudo containerlab deploy -t clos-2x4.clab.yml
    """
    _, plan, rendered = lab.load_topology(topology, name)
    if templates:
        rendered = render.render(plan, templates)
    exported = export.containerlab(plan, rendered, router_image=router_image, host_image=host_image)
    files = export.write(exported, Path(out))
    if as_json:
        click.echo(json.dumps({"lab": plan.lab, "format": fmt, "out": str(out),
                               "topology": str(Path(out) / exported.clab_file),
                               "files": [str(f) for f in files],
                               "not_exported": export.left_behind(plan)}, indent=2))
        return
    click.echo(f"lab {plan.lab}: wrote {exported.clab_file} and {len(files) - 1} node files to {out} "
               f"({len(plan.routers)} routers, {len(plan.hosts)} hosts, {len(plan.links)} links)")
    for what in export.left_behind(plan):
        click.echo(f"not exported: {what}")
    click.echo(f"deploy: cd {out} && sudo containerlab deploy -t {exported.clab_file}")
