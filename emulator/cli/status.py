from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from .. import faults, lab, procs, state
from ..errors import ExitCode
from ..metrics import launch as metrics_launch
from ..status import lab_status, verdict
from .names import LAB


@click.command("status")
@click.argument("name", required=False, type=LAB)
@click.option("--json", "as_json", is_flag=True,
              help="Machine-readable, with top-level \"converged\" and \"healthy\".")
def command(name: str | None, as_json: bool) -> None:
    """Per router: BGP sessions up/configured, prefixes, ECMP width toward remote hosts.

    On an l2 fabric, per switch: the STP root, its root port, the blocked ports and
    the MAC table size (and limit). On an evpn fabric, also per leaf: the VNI, its
    VTEP, the remote VTEPs it floods to, and its type-2 and type-3 route counts.

    Says whether the lab is converged (routing settled to what the plan and the
    active faults require) and healthy (nothing failed, full ECMP, every host
    reaches every other). Exits 6 when it is not converged.

    Example: rocelab status clos-2x4 --json
    """
    lab.require_root()
    st = lab_status(state.lab_plan(state.resolve_lab(name)))
    exporter = metrics_launch.exporter_info(st["lab"])
    if exporter:  # `up --metrics`: where Prometheus scrapes it, and whether it still runs
        st["metrics"] = exporter | {"running": procs.process_tag(exporter.get("pid", 0)) == st["lab"]}
    if as_json:
        click.echo(json.dumps(st, indent=2))
    else:
        _print(st)
    if not st["converged"]:
        sys.exit(ExitCode.NOT_CONVERGED)


def _print(st: dict[str, Any]) -> None:
    console = Console()
    if st["routers"]:
        console.print(_routers(st))
    if st.get("bridges"):
        console.print(_bridges(st))
    if st.get("evpn"):
        console.print(_evpn(st))
    _print_rest(st, console)


def _title(st: dict[str, Any]) -> str:
    mode = {"l2": "l2: one VLAN, 802.1D STP", "evpn": f"evpn over {st['addressing']}"}.get(
        st.get("fabric", "l3"), st["addressing"])
    shape = st.get("shape") or f"{st['spines']} spines x {st['leaves']} leaves"
    return f"lab {st['lab']} ({mode}, {shape})"


def _bridges(st: dict[str, Any]) -> Table:
    table = Table(title=_title(st))
    for col in ("switch", "STP root", "root port", "blocked ports", "other ports", "MACs", "ok"):
        table.add_column(col)
    for b in st["bridges"]:
        ports = b.get("ports", [])
        root_port = next((p["port"] for p in ports if p["role"] == "root"), "-")
        others = [f"{p['port']} {p['state']}" for p in ports
                  if p["role"] != "root" and p["state"] not in ("forwarding", "blocking")]
        limit = b.get("mac_table_limit")
        macs = f"{b.get('macs_learned', '?')}" + (f"/{limit}" if limit else "")
        table.add_row(b["node"], ("[bold]this switch[/]" if b.get("is_root") else b.get("root", "?")),
                      root_port, ", ".join(b.get("blocked", [])) or "-",
                      ", ".join(others) or "all forwarding", macs,
                      "yes" if b["ok"] else f"[red]no[/] {b.get('error') or ''}".rstrip())
    return table


def _evpn(st: dict[str, Any]) -> Table:
    table = Table(title=f"EVPN (lab {st['lab']})")
    for col in ("leaf", "VNI", "VTEP", "remote VTEPs", "MACs", "type-2", "type-3", "ok"):
        table.add_column(col)
    for v in st["evpn"]:
        table.add_row(v["node"], str(v.get("vni", "?")), str(v.get("vtep", "?")),
                      f"{len(v.get('remote_vteps', []))}/{v.get('remote_vteps_expected', '?')}",
                      str(v.get("macs", "?")), str(v.get("type2", "?")), str(v.get("type3", "?")),
                      "yes" if v["ok"] else f"[red]no[/] {v.get('error') or ''}".rstrip())
    return table


def _routers(st: dict[str, Any]) -> Table:
    table = Table(title=_title(st) if st.get("fabric", "l3") == "l3" else
                  f"underlay routers (lab {st['lab']})")
    for col in ("router", "ASN", "sessions", "prefixes rx", "ECMP", "ok"):
        table.add_column(col)
    for r in st["routers"]:
        ecmp = _span(r["ecmp_min"], r["ecmp_max"])
        want = _span(r.get("ecmp_expected_min", r["ecmp_expected"]), r["ecmp_expected"])
        table.add_row(r["node"], str(r["asn"]), f"{r['sessions_up']}/{r['sessions_configured']}",
                      str(r["prefixes_received"]), f"{ecmp} (want {want})",
                      "yes" if r["ok"] else f"[red]no[/] {r['error'] or ''}".rstrip())
    return table


def _span(lo: int, hi: int) -> str:
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def _rails(st: dict[str, Any]) -> Table:
    planes = "plane" in st["rails"][0]  # a multi-plane fabric: NIC k is on plane k
    table = Table(title=f"traffic per {'plane' if planes else 'rail'} (host NIC counters)")
    for col in ("plane" if planes else "rail", "leaves", *(["spines"] if planes else []),
                "sent", "received"):
        table.add_column(col)
    for r in st["rails"]:
        spines = [", ".join(r["spines"])] if planes else []
        table.add_row(str(r["rail"]), ", ".join(r["leaves"]), *spines,
                      f"{r['tx_bytes'] / 1e6:.1f} MB", f"{r['rx_bytes'] / 1e6:.1f} MB")
    return table


def _print_rest(st: dict[str, Any], console: Console) -> None:
    if st.get("rails"):
        console.print(_rails(st))
    reach = st["reachability"]
    hosts = len(st["hosts"])
    if reach is None:
        console.print("host reachability: not checked (not converged, or a fault in force)")
    else:
        how = ("full mesh" if reach.get("full_mesh", True)
               else f"{reach['pairs']} pairs covering every leaf pair")
        console.print(f"host reachability ({hosts} hosts, {how}): "
                      + ("ok" if reach["ok"] else "; ".join(reach["problems"][:5])))
    for f in st.get("faults", []):
        since = f"since {f['iso']}" if f.get("iso") else "not recorded (found in the kernel)"
        fault = faults.Fault.from_json(f)
        how = (f"{fault.how()}, link up, {f['dropped_packets']} packets hit" if fault.gray
               else f"silent, {f['dropped_packets']} packets dropped" if f["silent"] else "carrier down")
        console.print(f"[yellow]active fault[/]: {f['name']} ({how}), {since}; "
                      f"`rocelab heal {st['lab']} {f['name'].replace('-', ' ', 1)}` lifts it",
                      soft_wrap=True)
    if st.get("metrics"):
        m = st["metrics"]
        console.print(f"metrics: {m['url']} (exporter pid {m['pid']}"
                      + ("" if m["running"] else ", [red]not running[/]") + ")", soft_wrap=True)
    word = verdict(st)
    console.print(f"[green]{word}[/]" if st["healthy"] else f"[yellow]{word}[/]" if st["converged"]
                  else f"[red]{word}[/]", soft_wrap=True)
