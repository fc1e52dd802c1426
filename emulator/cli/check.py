from __future__ import annotations

import json

import click

from ..errors import RocelabError, SpecError
from ..experiment import runner
from ..experiment.spec import load, load_fabrics
from ..lab import load_topology
from ..spec import located, read_yaml


@click.command("check")
@click.argument("experiment", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="What was checked, as JSON.")
def command(experiment: str, as_json: bool) -> None:
    """Validate an experiment file without root and without running it.

    Checks the file (every field, every `expect:` line), its topology, and that its
    flows and actions name hosts, spines and switches of that topology. Exits 2 if
    anything is wrong, with one line naming the field.

    Example: rocelab check experiments/incast.yaml
    """
    if load_fabrics(experiment)[0].fabrics is not None:
        _compare(experiment, as_json)
        return
    exp, topology = load(experiment)
    plan = load_topology(topology)[1]
    try:
        runner.check(exp, plan)
    except SpecError:
        raise
    except RocelabError as e:  # a flow or action naming something the topology lacks
        field, _, problem = str(e).partition(": ")
        raise located(SpecError(experiment, field, problem), read_yaml(experiment)[1]) from None
    summary = {"experiment": exp.name, "topology": str(topology), "lab": exp.lab or plan.lab,
               "flows": len(exp.flows), "actions": len(exp.actions), "expect": list(exp.expect),
               "dilation": plan.dilation, "ok": True}
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(f"{experiment}: ok: {len(exp.flows)} flows, {len(exp.actions)} actions, "
               f"{len(exp.expect)} expectations on {plan.lab} ({topology.name}"
               + (f", D = {plan.dilation:g}" if plan.congestion else "") + ")")


def _compare(experiment: str, as_json: bool) -> None:
    """A `fabrics:` experiment: every fabric's topology, and the flows and actions on each."""
    try:
        exp, fabrics = runner.fabrics(experiment, live=False)
    except SpecError:
        raise
    except RocelabError as e:
        label = getattr(e, "fabric", "?")
        field, _, problem = str(e).removeprefix(f"fabric {label}: ").partition(": ")
        raise located(SpecError(experiment, field, f"{problem} (fabric {label})"),
                      read_yaml(experiment)[1]) from None
    summary = {"experiment": exp.name, "fabrics": {
        f.label: {"topology": str(f.topology), "lab": f.lab, "dilation": f.plan.dilation}
        for f in fabrics}, "flows": len(exp.flows), "actions": len(exp.actions),
        "expect": list(exp.expect), "ok": True}
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(f"{experiment}: ok: {len(exp.flows)} flows, {len(exp.actions)} actions, "
               f"{len(exp.expect)} expectations on {len(fabrics)} fabrics: "
               + ", ".join(f"{f.label} = {f.lab} ({f.topology.name})" for f in fabrics))
