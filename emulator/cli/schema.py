from __future__ import annotations

import json

import click

from ..spec import json_schema


@click.command("schema")
def command() -> None:
    """Print the topology file's JSON Schema (for editor validation).

    Example: rocelab schema > topology.schema.json
    """
    click.echo(json.dumps(json_schema(), indent=2))
