from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from .. import lab, state
from ..errors import ExitCode
from ..status import lab_status, verdict


@click.command("status")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True,
              help="Machine-readable, with top-level \"converged\" and \"healthy\".")
def command(name: str | None, as_json: bool) -> None:
    """Per router: BGP sessions up/configured, prefixes, ECMP width toward remote hosts.

    Says whether the lab is converged (routing settled to what the plan and the
    active faults require) and healthy (nothing failed, full ECMP, every host
    reaches every other). Exits 6 when it is not converged.

    Example: rocelab status clos-2x4 --json
    """
    lab.require_root()
    st = lab_status(state.lab_plan(state.resolve_lab(name)))
    if as_json:
        click.echo(json.dumps(st, indent=2))
    else:
        _print(st)
    if not st["converged"]:
        sys.exit(ExitCode.NOT_CONVERGED)


def _print(st: dict[str, Any]) -> None:
    table = Table(title=f"lab {st['lab']} ({st['addressing']}, {st['spines']} spines x "
                        f"{st['leaves']} leaves)")
    for col in ("router", "ASN", "sessions", "prefixes rx", "ECMP to hosts", "ok"):
        table.add_column(col)
    for r in st["routers"]:
        ecmp = f"{r['ecmp_min']}" + (f"-{r['ecmp_max']}" if r["ecmp_max"] != r["ecmp_min"] else "")
        table.add_row(r["node"], str(r["asn"]), f"{r['sessions_up']}/{r['sessions_configured']}",
                      str(r["prefixes_received"]), f"{ecmp} (want {r['ecmp_expected']})",
                      "yes" if r["ok"] else f"[red]no[/] {r['error'] or ''}".rstrip())
    console = Console()
    console.print(table)
    reach = st["reachability"]
    hosts = len(st["hosts"])
    if reach is None:
        console.print("host reachability: not checked (routing not converged)")
    else:
        console.print(f"host reachability ({hosts} hosts, full mesh): "
                      + ("ok" if reach["ok"] else "; ".join(reach["problems"][:5])))
    for f in st.get("faults", []):
        since = f"since {f['iso']}" if f.get("iso") else "not recorded (found in the kernel)"
        how = f"silent, {f['dropped_packets']} packets dropped" if f["silent"] else "carrier down"
        console.print(f"[yellow]active fault[/]: {f['name']} ({how}), {since}; "
                      f"`rocelab heal {st['lab']} {f['name'].replace('-', ' ', 1)}` lifts it",
                      soft_wrap=True)
    word = verdict(st)
    console.print(f"[green]{word}[/]" if st["healthy"] else f"[yellow]{word}[/]" if st["converged"]
                  else f"[red]{word}[/]", soft_wrap=True)
