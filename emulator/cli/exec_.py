from __future__ import annotations

import os
import sys

import click

from .. import lab, state
from ..hosts import kind_of
from ..paths import ENV_TAG, node_run_dir
from ..tools import lookup
from .names import LAB, NODE

FRR_SOCKET_DIR = "/var/run/frr"  # where vtysh looks without --vty_socket (FRR's build default)
FRR_CONFIG_DIR = "/etc/frr"  # where vtysh reads vtysh.conf and `write memory` writes frr.conf


@click.command("exec", context_settings={"ignore_unknown_options": True})
@click.argument("name", type=LAB)
@click.argument("node", type=NODE)
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
def command(name: str, node: str, argv: tuple[str, ...]) -> None:
    """Run a command inside a node's namespace.

    FRR's default socket and config directories (/run/frr, /etc/frr) are the
    node's own there: a plain `vtysh` talks to the router's daemons and `write
    memory` saves into the router's run dir; on a host (or an l2 switch) both are
    empty -- never the FRR or the config the machine itself has.

    On an rxe host (hosts.kind: rxe) the command runs inside its guest, through the
    guest's agent: output comes when it exits, no stdin.

    Example: rocelab exec clos-2x4 prefill1 -- ping -c 3 10.2.2.1
    """
    lab.require_root()
    plan = state.lab_plan(name)
    target = lookup.node(plan, node)  # exit 4 naming the nodes if there is none such
    env = dict(os.environ) | {ENV_TAG: plan.lab}  # tagged: `down` reaps what it leaves running
    own = str(node_run_dir(plan.lab, target.name)) if target in plan.frr_nodes else None
    hide = {os.path.realpath(FRR_SOCKET_DIR): own, FRR_CONFIG_DIR: own}
    try:  # in the namespace (this process replaced), or where the host's kind runs it (a guest)
        rc, out, err = kind_of(target).exec(plan, target, list(argv), env, hide)
    except FileNotFoundError:
        raise click.ClickException(f"command not found: {argv[0]}") from None
    sys.stdout.write(out)
    sys.stderr.write(err)
    sys.exit(125 if rc is None else rc)
