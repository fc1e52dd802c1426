"""`rocelab`: a thin command line over the library (one module per command).

Library code raises RocelabError subclasses; this layer turns them into one
line on stderr and the error's exit code, never a traceback.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from ..errors import RocelabError


class RocelabGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RocelabError as e:
            click.echo(f"rocelab: error: {e}", err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("rocelab: interrupted", err=True)
            sys.exit(130)


@click.group(cls=RocelabGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rocelab")
def main() -> None:
    """rocelab: a packet-level RoCEv2 fabric emulator on Linux network namespaces."""


def _register() -> None:
    from . import down, exec_, fail, graph, heal, kv, metrics, render, run, schema, status, top, transfer, up

    for module in (up, down, status, exec_, render, schema, transfer, kv, run, fail, heal,
                   metrics, top, graph):
        main.add_command(module.command)


_register()
