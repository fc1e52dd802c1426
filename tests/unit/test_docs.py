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


def test_every_source_path_the_docs_name_exists():
    import re

    named = {m for doc in [*Path("docs").glob("*.md"), Path("README.md")]
             for m in re.findall(r"`(emulator/[\w/]+(?:\.py)?)`", doc.read_text())}
    missing = sorted(p for p in named if not Path(p).exists())
    assert named and not missing, f"docs name paths that do not exist: {missing}"


def test_the_architecture_page_places_every_module():
    doc = Path("docs/architecture.md").read_text()
    top = [p for p in Path("emulator").iterdir()
           if (p.suffix == ".py" and p.stem not in ("__init__", "__main__"))
           or (p.is_dir() and (p / "__init__.py").exists())]
    missing = [p.name for p in top if f"emulator/{p.name}" not in doc]
    assert not missing, f"docs/architecture.md does not place {missing}"


def test_every_exit_code_is_in_the_table():
    from emulator.errors import ExitCode

    doc = Path("docs/cli.md").read_text()
    missing = [c.name for c in ExitCode if f"\n| {int(c)} |" not in doc]
    assert not missing, f"docs/cli.md's exit-code table lacks {missing}"
