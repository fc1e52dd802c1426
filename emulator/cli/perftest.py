from __future__ import annotations

import dataclasses
import json
from typing import Any

import click

from .. import lab, state, workload
from ..errors import RocelabError
from ..hosts import perftest as remote
from ..perftest.exchange import Test
from ..perftest.report import MB
from ..perftest.session import Options
from ..plan import Plan
from ..units import Dilation, parse_size
from .names import LAB, NODE
from .options import SIZE


@click.command("perftest")
@click.argument("name", type=LAB)
@click.argument("test", metavar="TEST", type=click.Choice([t.value for t in Test]))
@click.option("--src", type=NODE, help="Client host (an engine host).")
@click.option("--dst", type=NODE, help="Server host: an engine host (armed here), or a host whose port "
              "18515 already runs a perftest server.")
@click.option("--server", "as_server", is_flag=True, help="Only arm a server on --on and wait "
              "for one client (e.g. a real ib_write_bw in an rxe host).")
@click.option("--on", "on", type=NODE, help="With --server: the engine host to serve on.")
@click.option("-s", "--size", type=SIZE, default=None, help="Message size (perftest -s); default 65536 "
              "for BW, 2 for latency.")
@click.option("-a", "run_all", is_flag=True, help="All sizes 2 .. 8 MiB (perftest -a).")
@click.option("-n", "--iters", type=click.IntRange(min=0), default=0, help="Iterations (perftest -n).")
@click.option("-D", "--duration", type=click.FloatRange(min=0), default=0.0,
              help="Seconds (perftest -D).")
@click.option("-b", "duplex", is_flag=True, help="Bidirectional (perftest -b).")
@click.option("-q", "--qps", type=click.IntRange(1, 64), default=1, help="QPs (perftest -q).")
@click.option("--tclass", type=click.IntRange(-1, 255), default=-1,
              help="Traffic class shown (perftest --tclass).")
@click.option("--rate_limit", type=click.FloatRange(min=0), default=0.0, help="Gbit/s, real-equivalent on "
              "shaped labs (perftest --rate_limit with --rate_units=g).")
@click.option("--json", "as_json", is_flag=True, help="Print the parsed figures as JSON.")
def command(name: str, test: str, src: str | None, dst: str | None, as_server: bool,
            on: str | None, size: str | None, run_all: bool, iters: int, duration: float,
            duplex: bool, qps: int, tclass: int, rate_limit: float, as_json: bool) -> None:
    """Run a perftest test (ib_write_bw & co.) on the lab's engines, speaking perftest's
    own TCP exchange, so the other side may be real perftest on an rxe host.

    Prints perftest's own output; exits 8 if the test failed.

    Example: rocelab perftest clos-2x4 write_bw --src prefill1 --dst decode1 -s 1MiB -n 200
    """
    _check_roles(src, dst, as_server, on)  # a bad command line: exit 64 before root or the lab
    opts = _options(test=Test(test), size=parse_size(size, "-s") if size else 0, run_all=run_all,
                    iters=iters, duration=duration, duplex=duplex, qps=qps, tclass=tclass)
    lab.require_root()
    plan = state.lab_plan(name)
    dilation = plan.dilation if plan.congestion else None
    rate = rate_limit * 1e9
    opts = dataclasses.replace(opts, rate_bps=dilation.wall_bps(rate) if dilation and rate else rate)
    if as_server:
        res = _serve(plan, on or "", opts, test, as_json)
    else:
        # any kind of host: an rxe --dst serves with its own perftest (remote.run says
        # what an rxe --src cannot do)
        s = workload.host(plan, src or "", option="--src", rxe_ok=True)
        d = workload.host(plan, dst or "", option="--dst", rxe_ok=True)
        res = remote.run(plan, s, d, dataclasses.replace(opts, mtu=remote.path_mtu(s)))
    if dilation:
        for side in (res["client"], res["server"]):
            for row in (side or {}).get("rows", []):
                _real_equivalent(row, dilation)
    if as_json:
        click.echo(json.dumps(res, indent=2))
    else:
        _print(res["client"] or res["server"], dilation)


def _check_roles(src: str | None, dst: str | None, as_server: bool, on: str | None) -> None:
    """Either a client (--src and --dst, two hosts) or a server (--server --on HOST)."""
    if as_server and (not on or src or dst):
        raise click.UsageError("--server needs --on HOST and takes no --src or --dst")
    if not as_server and on:
        raise click.UsageError("--on is the host of --server; a client takes --src and --dst")
    if not as_server and (not src or not dst):
        raise click.UsageError("give --src HOST and --dst HOST (or --server --on HOST)")
    if not as_server and src == dst:
        raise click.UsageError(f"--src and --dst are the same host ({src}): give two hosts")


def _options(**kw: Any) -> Options:
    """perftest's own rules over the options (-n of a latency test, -D with -a, -b): a bad
    combination is a bad command line, refused before root or the lab."""
    try:
        return Options(**kw)
    except RocelabError as e:
        raise click.UsageError(str(e)) from None


def _serve(plan: Plan, on: str, opts: Options, test: str, as_json: bool) -> dict[str, Any]:
    host = workload.host(plan, on, option="--on", rxe_ok=True)
    if not as_json:
        click.echo(f"perftest {test} server on {on} ({host.address}:18515): waiting for a "
                   "client", err=True)
    opts = dataclasses.replace(opts, mtu=remote.path_mtu(host))
    return {"server": remote.serve(plan, host, opts), "client": None}


def _print(main: dict[str, Any], dilation: Dilation | None) -> None:
    """perftest's own output, then (shaped labs) the same rows real-equivalent."""
    click.echo(main["output"], nl=False)
    if not dilation or not main["rows"]:
        return
    click.echo(f" real-equivalent (time dilation D = {float(dilation):g}: rates x D, "
               "times / D)")
    bw = "bw_avg" in main["rows"][0]
    click.echo(REAL_BW_HEADER if bw else REAL_LAT_HEADER)
    keys = ("real_bw_peak_gbps", "real_bw_avg_gbps", "real_msg_rate_mpps") if bw \
        else tuple(f"real_{k}_usec" for k in LAT_FIGURES)
    for row in main["rows"]:
        click.echo(f" {row['size']:<10} {row['iters']:<11}"
                   + "".join(f" {row[k]:>14.4f}" for k in keys))


LAT_FIGURES = ("t_min", "t_max", "t_typical", "t_avg", "t_stdev", "p99", "p999")
REAL_BW_HEADER = (" #bytes     #iterations    BW peak[Gb/sec] BW average[Gb/sec]  "
                  "MsgRate[Mpps]")
REAL_LAT_HEADER = (" #bytes     #iterations " + "".join(
    f" {h:>14}" for h in ("t_min[usec]", "t_max[usec]", "t_typical", "t_avg[usec]",
                          "t_stdev[usec]", "99%[usec]", "99.9%[usec]")))


def _real_equivalent(row: dict, dilation: Dilation) -> None:
    """Add every figure in real-equivalent units under time dilation: rates x D
    (MB/sec -> Gbit/s), times / D."""
    if "bw_avg" in row:
        for k in ("bw_peak", "bw_avg"):
            row[f"real_{k}_gbps"] = dilation.real_bps(row[k] * MB * 8) / 1e9
        row["real_msg_rate_mpps"] = row["msg_rate"] * float(dilation)
    if "t_avg" in row:
        for k in LAT_FIGURES:
            row[f"real_{k}_usec"] = dilation.real_s(row[k])
