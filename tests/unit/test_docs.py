"""Docs stay true: every topology field and every CLI command is documented."""

from __future__ import annotations

from pathlib import Path

from emulator.cli import main
from emulator.spec import json_schema


def _fields(props: dict, defs: dict, prefix: str = "") -> list[str]:
    """Leaf fields (sections themselves are documented through their fields)."""
    out = []
    for name, prop in props.items():
        ref = prop.get("$ref", "").split("/")[-1]
        if ref in defs and "properties" in defs[ref]:
            out += _fields(defs[ref]["properties"], defs, f"{prefix}{name}.")
        else:
            out.append(prefix + name)
    return out


def test_every_topology_field_is_in_the_reference():
    schema = json_schema()
    doc = Path("docs/topology.md").read_text()
    fields = _fields(schema["properties"], schema["$defs"])
    missing = [f for f in fields if f"`{f}`" not in doc]
    assert not missing, f"docs/topology.md lacks {missing}"


def test_every_command_is_in_the_cli_reference():
    doc = Path("docs/cli.md").read_text()
    missing = [c for c in main.commands if f"## rocelab {c}" not in doc]
    assert not missing, f"docs/cli.md lacks {missing}"


def test_readme_has_the_two_commands():
    readme = Path("README.md").read_text()
    assert "make demo" in readme and "make test" in readme
