from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from .. import lab, outfile, state
from ..diagnose import Finding, Severity, diagnose, evidence, worst
from ..errors import ExitCode, RocelabError, SpecError
from ..units import parse_duration
from .names import LAB, NODE
from .progress import progress

SEVERITY_STYLE = {Severity.CRITICAL: "CRITICAL", Severity.WARNING: "WARNING ", Severity.INFO: "info    "}
LIVE_FLOW = "--flow needs a run's flows (--results); on a live lab use --src and --dst"


@click.command("diagnose")
@click.argument("name", required=False, type=LAB)
@click.option("--window", default="30s", show_default=True, metavar="DURATION",
              help="How long to sample a live lab's counters (e.g. 10s, 1m).")
@click.option("--results", "results_path", type=click.Path(exists=True, dir_okay=False),
              help="Diagnose a finished run's results.json instead of a live lab.")
@click.option("--flow", help="Only findings on this flow's path (a flow name of the run; "
              "needs --results: a live window records no flows).")
@click.option("--src", type=NODE, help="Only findings on the path from this host (live or "
              "--results)...")
@click.option("--dst", type=NODE, help="...to this host.")
@click.option("--evidence", "save", type=click.Path(dir_okay=False),
              help="Also write the counters the rules read to FILE (JSON; a test fixture).")
@click.option("--json", "as_json", is_flag=True, help='Print {"findings": [...]} as JSON.')
def command(name: str | None, window: str, results_path: str | None, flow: str | None,
            src: str | None, dst: str | None, save: str | None, as_json: bool) -> None:
    """Find the root cause of a slow or failing fabric from its counters.

    Samples a running lab for --window (or reads a run's results.json) and prints ranked
    findings: pause storms and their origin, ECN off on a switch, DCQCN off on a host,
    ECMP collisions, congested spines, routing problems, gray links, lossless drops,
    MTU mismatches and trimming hotspots, each with its evidence, the flows it hurt and
    the fix. Exits 13 when a finding is a warning or critical, 0 when the fabric looks
    healthy. --src/--dst narrow the findings to a path; --flow to a run's flow, so it
    needs --results (a live window records no flows).

    Example: rocelab diagnose clos-2x4-cc --window 20s --src prefill1 --dst decode1
    """
    seconds = _window(window)
    if flow and not results_path:  # before sampling: a live window records no flows
        raise click.UsageError(LIVE_FLOW)
    if results_path:
        if name:
            raise click.UsageError("give a lab NAME or --results, not both")
        ev = _from_results(Path(results_path))
    else:
        lab.require_root()
        plan = state.lab_plan(state.resolve_lab(name))
        for h in (src, dst):
            if h and h not in {n.name for n in plan.hosts}:
                raise click.BadParameter(f"no host {h!r} in lab {plan.lab}",
                                         param_hint="--src/--dst")
        with progress(f"sampling lab {plan.lab} for {seconds:g} s"):
            ev = evidence.collect(plan, seconds)
    findings = diagnose(ev, flow=flow, src=src, dst=dst)
    if save:
        outfile.write_text(save, json.dumps(ev.as_json(), indent=1) + "\n")
    if as_json:
        click.echo(json.dumps(report(ev, findings), indent=2))
    else:
        _print(ev, findings)
    if worst(findings) >= Severity.WARNING:
        sys.exit(ExitCode.FINDINGS)


def report(ev: evidence.Evidence, findings: list[Finding]) -> dict[str, Any]:
    return {"lab": ev.lab, "source": ev.source, "window_s": ev.window_s,
            "healthy": worst(findings) < Severity.WARNING,
            "findings": [f.as_json() for f in findings]}


def _window(value: str) -> float:
    try:
        return parse_duration(value, "--window", positive=True)
    except RocelabError as e:
        raise click.BadParameter(str(e).split(": ", 1)[-1], param_hint="--window") from None


def _from_results(path: Path) -> evidence.Evidence:
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise SpecError(str(path), "results", f"not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(raw, dict) or "flows" not in raw:
        raise SpecError(str(path), "results", "not a `rocelab run` results.json (no flows)")
    return evidence.from_results(raw, str(path))


def _print(ev: evidence.Evidence, findings: list[Finding]) -> None:
    where = "live" if ev.source == "live" else ev.source
    click.echo(f"lab {ev.lab}: {len(findings)} finding(s) over {ev.window_s:.1f} s ({where})")
    if not findings:
        click.echo("healthy: no queue, marking, pause, routing, loss or MTU problem found")
    for i, f in enumerate(findings, 1):
        click.echo(f"\n{i}. {SEVERITY_STYLE[f.severity]} {f.kind}: {f.cause}")
        for e in f.evidence[:8]:
            click.echo(f"     evidence: {_evidence_line(e)}")
        if f.affected.get("flows") or f.affected.get("hosts"):
            click.echo(f"     affected: flows {', '.join(f.affected.get('flows', [])) or '-'}; "
                       f"hosts {', '.join(f.affected.get('hosts', [])) or '-'}")
        click.echo(f"     fix: {f.fix}")


def _evidence_line(e: dict[str, Any]) -> str:
    where = ":".join(str(e[k]) for k in ("node", "port") if k in e)
    if "tc" in e:
        where += f" TC {e['tc']}"
    extra = ", ".join(f"{k} {v}" for k, v in e.items()
                      if k not in ("counter", "value", "node", "port", "tc", "at_s"))
    at = f" at {e['at_s']:.2f} s" if e.get("at_s") is not None else ""
    return (f"{e['counter']} = {e['value']}" + (f" on {where}" if where else "") + at
            + (f" ({extra})" if extra else ""))
