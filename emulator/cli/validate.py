from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console

from .. import lab, outfile, state
from ..errors import ExitCode
from ..names import check_lab
from ..validate import LIVE, Check, junit, validate_file, validate_lab
from .progress import progress


def _looks_like_file(target: str) -> bool:
    """A .yaml/.yml path or a file that exists; anything else is checked as a lab name."""
    try:
        return Path(target).suffix in (".yaml", ".yml") or Path(target).is_file()
    except OSError:  # a name too long to be a path: not a file, and not a lab name either
        return False


@click.command("validate")
@click.argument("target", required=False)
@click.option("--check", "checks", metavar="NAMES",
              help=f"Comma-separated live checks to run: {', '.join(LIVE)}, expect "
                   "(the topology's `validate:` block). Default: all.")
@click.option("--json", "as_json", is_flag=True, help="Every check as JSON.")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False),
              help="Also write the checks as JUnit XML (one testcase each) to this file.")
def command(target: str | None, checks: str | None, as_json: bool, junit_path: str | None) -> None:
    """Run named checks on a running lab (TARGET = its name), or check a topology file
    offline (TARGET = a .yaml file: schema, plan, render; no root needed).

    Each check passes or fails with what it saw. Exits 10 when a live check or an
    expectation fails, 2 when the file is invalid.

    Example: rocelab validate clos-2x4 --check bgp,fib,reach --junit validate.xml
    """
    if target and _looks_like_file(target):
        results, suite, failed = validate_file(target), Path(target).stem, ExitCode.BAD_FILE
    else:
        lab.require_root()
        name = state.resolve_lab(None if target is None else check_lab(target, "TARGET"))
        wanted = [c.strip() for c in checks.split(",") if c.strip()] if checks else None
        unknown = [c for c in wanted or [] if c not in (*LIVE, "expect")]
        if unknown:
            raise click.BadParameter(f"no check {unknown[0]!r}; checks: {', '.join(LIVE)}, expect",
                                     param_hint="--check")
        with progress(f"validating {name}"):
            results = validate_lab(state.lab_plan(name), state.lab_topology(name), wanted)
        suite, failed = name, ExitCode.VALIDATION_FAILED
    if junit_path:
        outfile.write_text(junit_path, junit(results, suite))
    if as_json:
        click.echo(json.dumps({"target": suite, "ok": all(c.ok for c in results),
                               "checks": [c.to_json() for c in results]}, indent=2))
    else:
        print_checks(results)
    if not all(c.ok for c in results):
        first = next(c for c in results if not c.ok)
        click.echo(f"rocelab: error: {first.problems[0] if first.problems else first.seen}", err=True)
        sys.exit(failed)


def print_checks(results: list[Check]) -> None:
    console = Console()
    for c in results:
        mark = "[yellow]skip[/]" if c.skipped else "[green]pass[/]" if c.ok else "[red]FAIL[/]"
        console.print(f"{mark}  {c.name:<14} {c.seen}  ({c.duration_s:.2f} s)", soft_wrap=True)
        for p in c.problems[:5]:
            console.print(f"      {p}", soft_wrap=True)
        if len(c.problems) > 5:
            console.print(f"      (+{len(c.problems) - 5} more)")
    bad = sum(not c.ok for c in results)
    console.print(f"{len(results) - bad}/{len(results)} checks passed")
