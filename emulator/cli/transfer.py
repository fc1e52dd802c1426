from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from .. import lab, report, state, workload
from ..engine.job import Job, Op
from ..errors import EngineError, IntegrityError
from ..plan import Plan
from ..report import record
from ..units import Dilation, parse_duration, parse_size, parse_speed
from .names import LAB, NODE
from .options import SIZE, SPEED, check_transport, engine_options, max_duration_option
from .progress import byte_progress


@click.command("transfer")
@click.argument("name", type=LAB)
@click.option("--src", type=NODE, required=True, help="Prefill host (where the data is).")
@click.option("--dst", type=NODE, required=True, help="Decode host (where it must land).")
@click.option("--size", required=True, type=SIZE, help="Bytes: 64MiB, 1GiB, 500MB, 4096.")
@click.option("--rate", type=SPEED, help="Rate limit of the transfer, real-equivalent (e.g. 100G): its QPs' "
              "NIC rate limiters, split evenly. Default: none.")
@max_duration_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@engine_options
def command(name: str, src: str, dst: str, size: str, rate: str | None, max_duration: str,
            op: str, transport: str, evs: int, qps: int, mtu: int, as_json: bool,
            out: str | None) -> None:
    """Move bytes from SRC to DST over RoCEv2 and verify them end to end.

    Exits 8 if the transfer failed (a QP over its retry limit, not done within
    --max-duration, ...), 9 if it completed but the two ends' digests of the data
    differ, 64 if it could not finish within --max-duration at all.

    Example: rocelab transfer clos-2x4 --src prefill1 --dst decode1 --size 64MiB --qps 4
    """
    check_transport(op, transport)
    lab.require_root()
    plan = state.lab_plan(name)
    job = Job(Op(op), size=parse_size(size), qps=qps, mtu=mtu, rate_bps=wall_rate(plan, rate),
              transport=transport, evs=evs,
              timeout_s=parse_duration(max_duration, "--max-duration"),
              extra={"progress_s": record.SAMPLE_EVERY_S} if out else {})
    s = workload.host(plan, src, rxe_ok=True)
    d = workload.host(plan, dst, option="--dst", rxe_ok=True)
    rec = record.Recorder(plan)
    with byte_progress(f"{op} {src} -> {dst}", job.payload_bytes, quiet=as_json) as tick, \
            (rec if out else contextlib.nullcontext()):
        res = workload.run_transfer(plan, s, d, job, rec.also(tick) if out else tick)
    if out:
        report.save(Path(out), rec.results("transfer", res, {"name": f"{src} -> {dst}", "src": src,
                                                             "dst": dst}), plan)
    if as_json:
        click.echo(json.dumps(res, indent=2))
    else:
        print_transfer(res, plan.dilation if plan.congestion else None)
        if out:
            Console().print(f"report: {Path(out) / 'report.html'} (and report.md, plots, results.json)")
    if res.get("failed"):
        raise EngineError(f"{src} -> {dst}: transfer failed: {res.get('error')}")
    if not res["integrity_ok"]:
        raise IntegrityError(f"{src} -> {dst}: the data {dst} holds differs from what {src} sent "
                             "(digests differ)")


def wall_rate(plan: Plan, rate: str | None) -> float:
    """--rate (real-equivalent, already checked by its option type) as the engine paces it."""
    return plan.dilation.wall_bps(parse_speed(rate, "--rate")) if rate else 0.0


def print_transfer(res: Mapping[str, Any], dilation: Dilation | None = None) -> None:
    """One transfer's result; on a shaped lab with the real-equivalent rate and time too."""
    console = Console()
    ok = "[green]ok[/]" if res["integrity_ok"] else "[red]FAILED[/]"
    real = (f" ({dilation.real_bps(res['goodput_gbps']):.1f} Gbit/s real-equivalent, "
            f"{dilation.real_s(res['duration_s']) * 1e3:.3f} ms)") if dilation else ""
    console.print(f"{res['op']} {res['src']} -> {res['dst']}: {res['bytes']} bytes in "
                  f"{res['duration_s']:.3f} s = {res['goodput_gbps']:.3f} Gbit/s{real} "
                  f"(handoff {res['handoff_s']:.3f} s incl. QP setup); integrity {ok}", soft_wrap=True)
    console.print(f"retransmitted {res['retransmitted_packets']}, NAKs {res['naks_rx']}, "
                  f"timeouts {res['timeouts']}, bad ICRC drops {res['bad_icrc']}")
    if res.get("mrc"):
        _print_mrc(console, res)
        return
    rails = any(q.get("rail") is not None for q in res["qps"])  # a multi-NIC host: QP i on rail i
    table = Table("QPN", "remote QPN", "UDP sport", *(["rail"] if rails else []), "uplink",
                  "retransmitted")
    for q in res["qps"]:
        table.add_row(hex(q["qpn"]), hex(q["remote_qpn"]), str(q["udp_sport"]),
                      *([str(q.get("rail"))] if rails else []), q["spine"] or "-",
                      str(q["retransmitted_packets"]))
    console.print(table)
    for host, rxe in (res.get("rxe") or {}).items():  # an rxe end: its device's counters
        moved = ", ".join(f"{k} {v}" for k, v in sorted(rxe["counters"].items()))
        console.print(f"rxe {host} ({rxe['role']}): hw_counters {moved or 'unchanged'}",
                      soft_wrap=True)


def _print_mrc(console: Console, res: Mapping[str, Any]) -> None:
    """An MRC transfer: its EV set's states, recovery counts and the bytes per spine."""
    m = res["mrc"]
    states = ", ".join(f"{k} {v}" for k, v in m["evs_by_state"].items() if v)
    console.print(f"MRC {m['conn']}: {m['evs_total']} EVs ({states}), retirements "
                  f"{m['retirements']}, probes {m['probes_answered']}/{m['probes_sent']}, "
                  f"trim NACKs {m['trim_nacks_received']}, longest interruption "
                  f"{res['longest_interruption_s'] * 1e3:.1f} ms", soft_wrap=True)
    spines: dict[str, int] = {}
    for p in m["paths"]:
        spines[p.get("spine") or "-"] = spines.get(p.get("spine") or "-", 0) + p["bytes"]
    table = Table("uplink", "bytes", "share")
    total = max(1, sum(spines.values()))
    for spine, n in sorted(spines.items()):
        table.add_row(spine, str(n), f"{100 * n / total:.1f} %")
    console.print(table)
