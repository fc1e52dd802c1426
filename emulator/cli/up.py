from __future__ import annotations

import signal
import sys
from typing import Any

import click

from .. import lab
from .progress import err_console, progress


def _sigterm_to_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # unwinds `up`'s transaction like Ctrl-C


@click.command("up")
@click.argument("topology", type=click.Path(dir_okay=False))
@click.option("--name", help="Lab name (default: the file's `name:`).")
@click.option("--timeout", default=lab.DEFAULT_TIMEOUT_S, show_default=True, type=float,
              help="Seconds to wait for convergence before rolling back.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def command(topology: str, name: str | None, timeout: float, as_json: bool) -> None:
    """Build a lab from TOPOLOGY and return once it has converged.

    Example: rocelab up topologies/clos-2x4.yaml
    """
    signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
    with progress(f"up {topology}") as update:
        result = lab.up(topology, name=name, timeout_s=timeout, progress=update)
    p, t = result.plan, result.timings
    if as_json:
        import json
        click.echo(json.dumps({"lab": p.lab, "converged": True, "timings": t}, indent=2))
        return
    err_console.print(
        f"[green]lab {p.lab} converged[/] in {t['total_s']:.2f} s: {len(p.routers)} routers, "
        f"{len(p.hosts)} hosts, {len(p.links)} links "
        f"(realize {t['realize_s']:.2f} s, daemons {t['daemons_start_s']:.2f} s, "
        f"BGP {t['bgp_converged_s']:.2f} s, verify {t['verified_s']:.2f} s)", soft_wrap=True)
    click.echo(f"next: rocelab status {p.lab}   rocelab exec {p.lab} {p.hosts[0].name} -- ping "
               f"{p.hosts[-1].address}   rocelab down {p.lab}", file=sys.stdout)
