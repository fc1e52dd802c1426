from __future__ import annotations

import click

from .. import lab, state
from ..tools import vtysh
from .names import LAB, NODE


@click.command("vtysh")
@click.argument("name", type=LAB)
@click.argument("node", type=NODE)
@click.option("-c", "--command", "commands", multiple=True, metavar="CMD",
              help="A vtysh command; repeat for several, run in order. None: an interactive shell.")
def command(name: str, node: str, commands: tuple[str, ...]) -> None:
    """The lab's FRR shell on one router (never the host's FRR).

    With -c, runs the commands and prints their output (exit 1 if vtysh fails);
    without, an interactive vtysh on this terminal.

    Example: rocelab vtysh clos-2x4 leaf1 -c 'show bgp summary json'
    """
    lab.require_root()
    plan = state.lab_plan(name)
    if not commands:
        vtysh.shell(plan, node)  # does not return: this process becomes vtysh
    try:
        out = vtysh.run(plan, node, commands)
    except vtysh.VtyshError as e:
        click.echo(e.output, nl=False)  # the commands that ran before the one that failed
        raise
    click.echo(out, nl=False)
