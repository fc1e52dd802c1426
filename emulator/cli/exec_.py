from __future__ import annotations

import os

import click

from .. import lab, netns, state
from ..paths import ENV_TAG
from ..tools import lookup


@click.command("exec", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("node")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
def command(name: str, node: str, argv: tuple[str, ...]) -> None:
    """Run a command inside a node's namespace.

    Example: rocelab exec clos-2x4 prefill1 -- ping -c 3 10.2.2.1
    """
    lab.require_root()
    plan = state.lab_plan(name)
    target = lookup.node(plan, node)  # exit 4 naming the nodes if there is none such
    env = dict(os.environ) | {ENV_TAG: plan.lab}  # tagged: `down` reaps what it leaves running
    try:
        netns.exec_in(target.netns, list(argv), env)
    except FileNotFoundError:
        raise click.ClickException(f"command not found: {argv[0]}") from None
