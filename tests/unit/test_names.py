"""Issue 24 (1, 12): every lab and node name is checked against the topology's rules first,
and `down` never removes anything but the lab's own run directory directly under the run root.

A regression here would delete host files as root, so the cases that name `/` or `..` run
in-process with `shutil.rmtree` replaced by a recorder: a broken check fails the test
instead of removing anything. `down ../victim` runs for real, under a scratch run root.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from emulator import lab, names, paths, procs, state
from emulator.api import Lab
from emulator.cli import main
from emulator.errors import BadNameError, ExitCode, RocelabError
from emulator.pytest_plugin import LabFactory

ROCELAB = str(Path(sys.executable).parent / "rocelab")
TOPO = str(Path(__file__).resolve().parents[2] / "topologies" / "clos-2x4.yaml")
IS_ROOT = os.geteuid() == 0
HOSTILE = ["", "..", ".", "/", "../victim", "/etc", "lab\nx", "a" * 300, "lab/../x", "Lab", "lab\0",
           "-rf", "lab-", "a--b", "x" * 16]


@pytest.mark.parametrize("good", ["a", "clos-2x4", "x" * 15, "x" * 15 + "-" + "y" * 8, "h3-unit-fake"])
def test_lab_names_the_topology_allows(good):
    assert names.check_lab(good) == good


@pytest.mark.parametrize("bad", HOSTILE)
def test_a_bad_lab_name_is_one_line_naming_the_argument_and_the_rule(bad):
    with pytest.raises(BadNameError) as e:
        names.check_lab(bad, "NAME")
    text = str(e.value)
    assert "\n" not in text and text.startswith("NAME: ") and names.LAB_RULE in text
    assert len(text) < 300 and e.value.exit_code == ExitCode.USAGE


def test_the_rule_says_what_the_pattern_does():
    """Issue 25: a 16-letter name was refused by a message that allowed 1-24 characters."""
    assert not names.is_lab_name("x" * 16) and names.is_lab_name("x" * 15 + "-y")
    assert "at most 15 before the first dash" in names.LAB_RULE


@pytest.mark.parametrize("bad", ["", "..", "leaf1\n", "a" * 13, "Leaf1", "1leaf", "leaf-1"])
def test_a_bad_node_name_is_refused(bad):
    with pytest.raises(BadNameError, match=r"^src: .* is not a node name: must be 1-12 characters"):
        names.check_node(bad, "src")


@pytest.fixture
def run_root(tmp_path, monkeypatch):
    """A private run root; any rmtree `down` asks for is recorded, never done."""
    root = tmp_path / "run"
    root.mkdir()
    monkeypatch.setattr(paths, "RUN_ROOT", root)
    monkeypatch.setattr(state, "RUN_ROOT", root)
    removed: list[Path] = []
    monkeypatch.setattr(lab.shutil, "rmtree", lambda p, **kw: removed.append(Path(p)))
    return root, removed


@pytest.mark.parametrize("bad", ["/", "..", ".", "../victim", "", "lab\nx", "a" * 300])
def test_down_refuses_a_path_before_anything(bad, run_root):
    res = CliRunner().invoke(main, ["down", bad])
    assert res.exit_code == ExitCode.USAGE, res.output
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and "NAME" in lines[0] and "is not a lab name" in lines[0], res.stderr
    assert run_root[1] == []


@pytest.mark.parametrize("bad", ["/", "..", "../victim", ""])
def test_the_api_and_the_plugin_refuse_a_path(bad, run_root):
    with pytest.raises(BadNameError):
        lab.down(bad)
    with pytest.raises(BadNameError):
        Lab.attach(bad)
    with pytest.raises(BadNameError):
        with Lab.up(TOPO, name=bad):
            pass
    with pytest.raises(BadNameError):
        LabFactory()(TOPO, name=bad)
    with pytest.raises(BadNameError):
        paths.lab_run_dir(bad)
    assert run_root[1] == []


def test_an_empty_name_is_not_the_only_running_lab(monkeypatch):
    """Issue 24 (12): `status ""` acted on the one lab running."""
    monkeypatch.setattr(state, "known_labs", lambda: {"only"})
    assert state.resolve_lab(None) == "only"
    with pytest.raises(BadNameError):
        state.resolve_lab("")


def test_a_tag_or_directory_that_is_no_lab_name_is_no_lab(run_root, monkeypatch):
    """Any process may carry ROCELAB_LAB=..: `down --all` must not take it for a lab."""
    root = run_root[0]
    (root / "Not_A_Lab").mkdir()
    (root / "good-lab").mkdir()
    monkeypatch.setattr(procs, "tagged_processes", lambda: {1: "..", 2: "/"})
    monkeypatch.setattr(state, "tagged_namespaces", lambda: {"x": "../x"})
    assert state.known_labs() == {"good-lab"}


@pytest.fixture
def planted_link(run_root, tmp_path):
    """xa-link in the run root: a symlink to a decoy dir holding a precious file."""
    root = run_root[0]
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / "precious").write_text("keep me\n")
    (root / "xa-link").symlink_to(decoy)
    return root, decoy


def test_a_symlinked_run_dir_is_refused_not_followed(planted_link):
    root, _ = planted_link
    with pytest.raises(RocelabError, match="is a symlink"):
        paths.own_run_dir("xa-link")
    (root / "xa-real").mkdir()
    assert paths.own_run_dir("xa-real") == root / "xa-real"
    assert paths.own_run_dir("xa-none") is None


@pytest.mark.skipif(not IS_ROOT, reason="down needs root")
def test_down_of_a_symlinked_run_dir_leaves_the_decoy(run_root, planted_link):
    _, decoy = planted_link
    with pytest.raises(RocelabError, match="is a symlink"):
        lab.down("xa-link")
    assert run_root[1] == [] and (decoy / "precious").read_text() == "keep me\n"


def test_down_dotdot_victim_leaves_the_victim(tmp_path):
    """The issue's reproduction, as a user runs it (a real process, a scratch run root)."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "data").write_text("precious\n")
    env = dict(os.environ, ROCELAB_RUN_ROOT=str(tmp_path / "run"))
    res = subprocess.run([ROCELAB, "down", "../victim"], capture_output=True, text=True, env=env,
                         timeout=60)
    assert res.returncode == ExitCode.USAGE, res.stderr
    assert res.stderr.count("\n") == 1 and "'../victim' is not a lab name" in res.stderr
    assert (victim / "data").read_text() == "precious\n"


def _name_params():
    from emulator.cli.names import LAB, NODE
    for name, cmd in sorted(main.commands.items()):
        for p in cmd.params:
            if p.type in (LAB, NODE):
                yield pytest.param(name, p.name, id=f"{name}-{p.name}")


def _argv(cmd_name: str, target: str, bad: str) -> list[str]:
    """A command line that is good but for `target`, which gets `bad`."""
    import click

    from emulator.cli.names import LAB, NODE
    cmd = main.commands[cmd_name]
    argv = [cmd_name]
    good = {LAB: "zz-fuzz-nolab", NODE: "leaf1"}
    for p in cmd.params:
        value = bad if p.name == target else good.get(p.type)
        if isinstance(p, click.Option) and (p.name == target or (p.required and value)):
            argv += [p.opts[0], value or "1"]
    for p in cmd.params:
        if isinstance(p, click.Argument):
            if p.name == target:
                argv.append(bad)
            elif p.required:
                choice = p.type.choices[0] if isinstance(p.type, click.Choice) else None
                argv += ["--"] * (p.nargs < 0) + [good.get(p.type) or choice or "true"]
    return argv


@pytest.mark.parametrize("bad", ["", "a\nb", "x" * 300])
@pytest.mark.parametrize(("command", "param"), list(_name_params()))
def test_every_name_a_command_takes_is_checked_naming_it(command, param, bad, run_root):
    res = CliRunner().invoke(main, _argv(command, param, bad))
    lines = res.stderr.splitlines()
    assert res.exit_code == ExitCode.USAGE and len(lines) == 1, res.output
    assert "is not a lab name" in lines[0] or "is not a node name" in lines[0], lines[0]
    assert param.upper() in lines[0] or f"--{param}" in lines[0], lines[0]


def test_every_lab_or_node_parameter_has_the_name_type():
    """A new command's NAME, NODE, --name, --src, --dst or --on cannot skip the check."""
    from emulator.cli.names import LAB, NODE
    loose = [f"{n} {p.name}" for n, cmd in main.commands.items() for p in cmd.params
             if p.name in ("name", "node", "src", "dst", "on") and p.type not in (LAB, NODE)]
    assert not loose, f"lab or node names without cli.names.LAB/NODE: {loose}"
