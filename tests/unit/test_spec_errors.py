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


def test_file_errors_name_the_line_of_the_field(tmp_path):
    bad = tmp_path / "t.yaml"
    bad.write_text("name: t\nspines: 2\nlinks:\n  speed: fast\nhosts:\n  roles:\n    leaf9: prefill\n")
    with pytest.raises(SpecError) as err:
        load_topology(bad)
    assert str(err.value) == (f"{bad}: line 4: links.speed: must be a rate like 100G, 400G "
                              f"or 25000M (got \"fast\")")
    bad.write_text(bad.read_text().replace("fast", "100G"))  # now the plan's check fails
    with pytest.raises(SpecError, match=rf"^{bad}: line 7: hosts.roles.leaf9: no such leaf"):
        load_topology(bad)


def test_experiment_files_share_the_strict_boundary(tmp_path):
    from emulator.experiment.spec import load as load_experiment

    topo = Path("topologies/clos-2x4.yaml").resolve()
    exp = tmp_path / "e.yaml"
    flow = "  - name: a\n    src: prefill1\n    dst: decode1\n    size: 1MiB\n"
    exp.write_text(f"name: e\ntopology: {topo}\nflows:\n{flow}{flow}    qps: '2'\n")
    with pytest.raises(SpecError) as err:  # strict: a quoted number is not a number
        load_experiment(exp)
    assert str(err.value).startswith(f"{exp}: line 12: flows.1.qps: input should be a valid integer")
    exp.write_text(f"name: e\ntopology: {topo}\nflows:\n{flow}    sise: 1MiB\n")
    with pytest.raises(SpecError, match=r"line 8: flows.0.sise: unknown field; allowed: name, src, dst"):
        load_experiment(exp)
    exp.write_text(f"name: e\ntopology: nope.yaml\nflows:\n{flow}")
    with pytest.raises(SpecError, match=r"line 2: topology: no such file"):
        load_experiment(exp)
    exp.write_text("- just\n- a list\n")
    with pytest.raises(SpecError, match=r"\(top level\): must be a mapping of fields \(name, topology"):
        load_experiment(exp)


def _bomb(levels: int = 9) -> str:
    text = 'name: x\nl0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for i in range(1, levels):
        text += f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n"
    return text


@pytest.mark.parametrize("text, problem", [
    (_bomb(), "uses more than 16 YAML aliases"),  # 9^9 elements once expanded
    ("name: x\nd: " + "[" * 1000 + "]" * 1000 + "\n", "nests deeper than 32 levels"),
    ("name: x\ndescription: '" + "a" * (1 << 20) + "'\n", "at most 1048576"),
])
def test_hostile_yaml_is_refused_fast_in_one_line(tmp_path, text, problem):
    """Issue 15 finding 4: a YAML bomb took 124 s and 5.8 GB before failing."""
    import time

    from emulator.spec import load

    f = tmp_path / "hostile.yaml"
    f.write_text(text)
    t = time.monotonic()
    with pytest.raises(SpecError) as e:
        load(f)
    assert time.monotonic() - t < 5
    assert problem in str(e.value) and "\n" not in str(e.value) and len(str(e.value)) < 200


def test_a_few_aliases_still_work(tmp_path):
    from emulator.spec import load

    f = tmp_path / "ok.yaml"
    f.write_text("name: x\nhosts: {per_leaf: &n 3}\nspines: *n\n")
    assert load(f).spines == 3


@pytest.mark.parametrize("blob", [b"\x00", b"name: x\x07\n", b"\xff\xfe\x00a"])
def test_binary_files_are_one_line_errors(tmp_path, blob):
    """Found by the fuzz test: a NUL byte made PyYAML's multi-line ReaderError the message."""
    from emulator.spec import load

    f = tmp_path / "binary.yaml"
    f.write_bytes(blob)
    with pytest.raises(SpecError) as e:
        load(f)
    assert "\n" not in str(e.value)
