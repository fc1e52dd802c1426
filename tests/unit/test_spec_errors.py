"""Bad topology files: one line, naming the field and what is allowed (golden)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from emulator.errors import SpecError
from emulator.lab import load_topology
from emulator.plan import compile_plan
from emulator.spec import load, parse

CASES = yaml.safe_load((Path(__file__).parent / "cases" / "bad_topologies.yaml").read_text())


def message(name: str, data: object) -> str:
    try:
        compile_plan(parse(data, f"{name}.yaml"), f"{name}.yaml")
    except SpecError as e:
        return str(e)
    raise AssertionError(f"case {name} was accepted")


def test_golden_spec_errors(golden):
    lines = [f"{name}: {message(name, data)}" for name, data in CASES.items()]
    golden("spec_errors.txt", "\n".join(lines) + "\n")


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_error_is_one_line_naming_a_field(name):
    msg = message(name, CASES[name])
    assert "\n" not in msg
    source, field, problem = msg.split(": ", 2)
    assert source == f"{name}.yaml" and field and problem


def test_yaml_syntax_error_names_the_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nspines: [1,\n")
    with pytest.raises(SpecError, match=r"bad.yaml: line \d+: invalid YAML"):
        load(bad)


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="cannot read"):
        load(tmp_path / "nope.yaml")


def test_name_override_is_validated(tmp_path):
    with pytest.raises(SpecError, match="name: must be"):
        load_topology("topologies/clos-2x4.yaml", name="Bad_Name")
