from __future__ import annotations

import json
from pathlib import Path

import click

from .. import estimate, lab, neighbours, render
from .names import LAB


def _ratios(ratios: dict[str, float]) -> str:
    """leaf1-4 1:1, spine1-4 2:1 -- runs of nodes with the same ratio, folded."""
    groups: dict[float, list[str]] = {}
    for node, r in ratios.items():
        groups.setdefault(r, []).append(node)
    return ", ".join(f"{_span(nodes)} {r:g}:1" for r, nodes in groups.items())


def _span(nodes: list[str]) -> str:
    return nodes[0] if len(nodes) == 1 else f"{nodes[0]}..{nodes[-1]} ({len(nodes)})"


@click.command("render")
@click.argument("topology", type=click.Path(dir_okay=False))
@click.option("-o", "--out", required=True, type=click.Path(file_okay=False),
              help="Directory for plan.json, <router>/<daemon>.conf and frr.conf, <host>/host.sh: "
                   "new, empty, or an earlier render (replaced). Anything else is refused.")
@click.option("--name", type=LAB, help="Lab name (default: the file's `name:`).")
@click.option("--templates", type=click.Path(exists=True, file_okay=False),
              help="A directory of FRR templates (*.conf.j2) that replace rocelab's; the ones "
                   "it lacks are rocelab's.")
@click.option("--json", "as_json", is_flag=True, help="The files written, as JSON.")
def command(topology: str, out: str, name: str | None, templates: str | None, as_json: bool) -> None:
    """Write every node's config and the resolved plan (JSON). No root needed.

    Each router gets its daemons' files and one integrated frr.conf (vtysh format,
    addresses included: it configures a real device too); each host a host.sh of
    `ip` commands.

    DIR then holds exactly this render (ready to diff against golden files): an
    earlier rocelab render there, of any topology, is replaced; a directory holding
    anything else is refused and left as it was.

    Example: rocelab render topologies/clos-2x4.yaml -o /tmp/clos
    """
    _, plan, rendered = lab.load_topology(topology, name, templates)
    files = render.write(rendered, Path(out))
    need, limit = neighbours.needed(plan), neighbours.limits()
    pinned = neighbours.pinned(plan)
    est, available = estimate.estimate(plan), estimate.available_mb()
    ratios = plan.oversubscription()
    if as_json:
        click.echo(json.dumps({"lab": plan.lab, "out": str(out), "files": [str(f) for f in files],
                               "shape": plan.shape(), "oversubscription": ratios,
                               "neighbours": {"needed": need, "pinned": pinned, "host_limit": limit},
                               "estimate": est.to_json() | {"available_mb": available}},
                              indent=2))
        return
    click.echo(f"lab {plan.lab}: wrote {len(files)} files to {out}")
    click.echo(f"{plan.shape()}, {len(plan.hosts)} hosts; links " + ", ".join(
        f"{s / 1e9:g}G" for s in sorted({link.speed_bps for link in plan.links})))
    if ratios:
        click.echo("oversubscription (down:up capacity): " + _ratios(ratios))
    click.echo(f"neighbour entries it needs: IPv4 {need['ipv4']}, IPv6 {need['ipv6']} "
               f"(this host's limit, for every lab together: {limit['ipv4']} and {limit['ipv6']}; "
               f"pinned, outside the limit: IPv4 {pinned['ipv4']}, IPv6 {pinned['ipv6']})")
    click.echo(f"estimate: {est.summary()}; this machine has {available / 1024:.1f} GB available"
               + ("" if estimate.fits(est, available) else " -- too little: `up` would refuse it"))
