from __future__ import annotations

import sys

import click

from .. import calibration, lab, state
from ..errors import ExitCode
from ..metrics import launch as metrics_launch
from ..metrics.exporter import Listen
from ..plan import Plan
from ..validate import Check, validate_lab
from .metrics import check_exposure, parse_listen
from .names import LAB
from .progress import err_console, interrupt_on_sigterm, reporter
from .validate import print_checks


def _listen(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """ADDRESS:PORT checked for form (a bad one: exit 64 before anything is touched)."""
    return None if value is None else str(parse_listen(ctx, param, value))


@click.command("up")
@click.argument("topology", type=click.Path(dir_okay=False))
@click.option("--name", type=LAB, help="Lab name (default: the file's `name:`).")
@click.option("--timeout", default=lab.DEFAULT_TIMEOUT_S, show_default=True,
              type=click.FloatRange(min=0, min_open=True),
              help="Seconds to wait for convergence before rolling back.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--quiet", "-q", is_flag=True,
              help="No progress on stderr (the result, warnings and errors still show).")
@click.option("--validate", "run_checks", is_flag=True,
              help="Then run every `rocelab validate` check and the topology's `validate:` "
                   "block; exit 10 if one fails (the lab stays up to look at).")
@click.option("--raise-neigh-limit", is_flag=True,
              help="If the lab would overflow the host's neighbour tables (gc_thresh3, shared "
                   "by every namespace), raise the limit instead of refusing (exit 12); the "
                   "original is recorded and restored when the last lab is down.")
@click.option("--templates", type=click.Path(exists=True, file_okay=False),
              help="A directory of FRR templates (*.conf.j2, named as in frr-templates/) that "
                   "replace rocelab's; the ones it lacks are rocelab's. Recorded with the lab.")
@click.option("--metrics", "metrics", callback=_listen, metavar="ADDRESS:PORT",
              help="Also serve the lab's Prometheus /metrics there (e.g. 127.0.0.1:9464; port 0: "
                   "a free one), from an exporter started with the lab and stopped by `down`.")
@click.option("--expose-metrics", is_flag=True,
              help="Allow a non-loopback --metrics address (0.0.0.0, ::, a LAN address): /metrics "
                   "is then reachable from other machines, without authentication.")
def command(topology: str, name: str | None, timeout: float, as_json: bool, quiet: bool,
            run_checks: bool, raise_neigh_limit: bool, templates: str | None, metrics: str | None,
            expose_metrics: bool) -> None:
    """Build a lab from TOPOLOGY and return once it has converged.

    Example: rocelab up topologies/clos-2x4.yaml
    """
    if metrics is not None:
        check_exposure(Listen.parse(metrics), expose_metrics, "up")
    interrupt_on_sigterm()
    with reporter(quiet) as update:
        result = lab.up(topology, name=name, timeout_s=timeout, progress=update,
                        raise_neigh_limit=raise_neigh_limit, templates=templates, metrics=metrics,
                        expose_metrics=expose_metrics)
    p, t = result.plan, result.timings
    _calibration_advice(p)
    checks = validate_lab(p, state.lab_topology(p.lab)) if run_checks else None
    exporter = metrics_launch.exporter_info(p.lab) if metrics is not None else None
    if as_json:
        import json
        click.echo(json.dumps({"lab": p.lab, "converged": True, "timings": t} | (
            {"checks": [c.to_json() for c in checks]} if checks is not None else {}) | (
            {"metrics": exporter} if exporter else {}), indent=2))
    else:
        _print(p, t, checks)
        if exporter:
            click.echo(f"metrics: {exporter['url']} (exporter pid {exporter['pid']}, "
                       "stopped by `rocelab down`)")
    if checks is not None and not all(c.ok for c in checks):
        sys.exit(ExitCode.VALIDATION_FAILED)


def _calibration_advice(p: Plan) -> None:
    """One line on stderr if the lab is shaped faster than this machine held (calibrate)."""
    line = calibration.advice_for(p.lab, p.congestion.rate_bps if p.congestion else None,
                                  p.dilation)
    if line:
        err_console.print(line, soft_wrap=True, markup=False, style="yellow")


def _print(p: Plan, t: dict[str, float], checks: list[Check] | None) -> None:
    err_console.print(
        f"[green]lab {p.lab} converged[/] in {t['total_s']:.2f} s: {len(p.routers)} routers, "
        f"{len(p.hosts)} hosts, {len(p.links)} links "
        f"(realize {t['realize_s']:.2f} s, daemons {t['daemons_start_s']:.2f} s, "
        f"BGP {t['bgp_converged_s']:.2f} s, verify {t['verified_s']:.2f} s)", soft_wrap=True)
    click.echo(f"next: rocelab status {p.lab}   rocelab exec {p.lab} {p.hosts[0].name} -- ping -c 3 "
               f"{p.hosts[-1].address}   rocelab down {p.lab}", file=sys.stdout)
    if checks is not None:
        print_checks(checks)
