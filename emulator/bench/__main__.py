"""python -m emulator.bench [--only SECTION] [--repeats N]: print benchmark JSON to stdout."""

from __future__ import annotations

import json
import os
import platform
import sys
import time

import click

from . import congestion, dilation, engine, fabric, faults, l2, mrc, pfc, rxe, scale

SECTIONS = {"fabric": fabric.run, "engine": engine.run, "faults": faults.run,
            "congestion": congestion.run, "l2": l2.run, "scale": scale.run,
            "rxe": rxe.run, "dilation": dilation.run, "pfc": pfc.run, "mrc": mrc.run}


@click.command()
@click.option("--only", type=click.Choice(sorted(SECTIONS)), multiple=True, help="Run only these.")
@click.option("--repeats", default=3, show_default=True, help="Runs per measurement (median).")
def main(only: tuple[str, ...], repeats: int) -> None:
    if os.geteuid() != 0:
        sys.exit("rocelab bench: needs root")
    report = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                          "python": platform.python_version()},
              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for name in only or SECTIONS:
        report[name] = SECTIONS[name](repeats=repeats)
    click.echo(json.dumps(report, indent=2))


main()
