"""`rocelab render -o DIR`: DIR ends up holding exactly this render, and nothing foreign is lost.

A CI that renders and then diffs against golden files must not see files an
earlier render of another topology left behind; and a directory that is not a
rocelab render is refused before anything in it is touched.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from emulator import render
from emulator.cli import main
from emulator.errors import RocelabError
from emulator.lab import load_topology

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGIES = sorted((ROOT / "topologies").glob("*.yaml"))


def rocelab(*args: str):
    return CliRunner().invoke(main, list(args))


def files_under(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): p.read_text() for p in sorted(d.rglob("*")) if p.is_file()}


def expected(topology: str) -> dict[str, str]:
    """What a render of `topology` consists of, straight from the renderer."""
    rendered = load_topology(ROOT / "topologies" / topology)[2]
    return {"plan.json": rendered.plan_json} | {
        f"{node}/{name}": text for node, files in rendered.files.items() for name, text in files.items()}


def render_into(topology: str, out: Path):
    return rocelab("render", str(ROOT / "topologies" / topology), "-o", str(out))


def assert_refused(res, out: Path, *words: str) -> None:
    assert res.exit_code == 1, res.output
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rocelab: error: {out}: "), res.stderr
    assert "Traceback" not in res.output
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize("first, second", [
    ("clos-8x16.yaml", "clos-2x4.yaml"),  # 12 leaves and 6 spines fewer: their dirs must go
    ("clos-2x4-bfd.yaml", "clos-2x4.yaml"),  # same nodes, but no bfdd.conf any more
    ("clos-2x4.yaml", "clos-2x4.yaml"),  # the same again: idempotent
])
def test_render_over_an_earlier_render_leaves_exactly_the_new_one(tmp_path, first, second):
    out = tmp_path / "r"
    assert render_into(first, out).exit_code == 0
    res = render_into(second, out)
    assert res.exit_code == 0, res.output
    assert files_under(out) == expected(second)
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(
        {k.split("/")[0] for k in expected(second) if "/" in k})  # no empty node dirs either
    first_line, *_, needs, est = res.stdout.strip().splitlines()
    assert first_line == f"lab {second[:-5]}: wrote {len(expected(second))} files to {out}"
    assert needs.startswith("neighbour entries it needs: IPv4 ")  # the host budget (issue 15)
    assert est.startswith("estimate: ") and " of memory; this machine has " in est  # issue 16


def test_render_creates_a_new_directory_and_fills_an_empty_one(tmp_path):
    assert render_into("clos-2x4.yaml", tmp_path / "a" / "b").exit_code == 0
    assert files_under(tmp_path / "a" / "b") == expected("clos-2x4.yaml")
    (tmp_path / "empty").mkdir()
    assert render_into("clos-2x4.yaml", tmp_path / "empty").exit_code == 0
    assert files_under(tmp_path / "empty") == expected("clos-2x4.yaml")


def test_a_directory_that_is_not_a_render_is_refused_and_untouched(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious\n")
    (out / "leaf1").mkdir()  # even a node-named dir is not enough without a plan.json
    res = render_into("clos-2x4.yaml", out)
    assert_refused(res, out, "not a rocelab render")
    assert files_under(out) == {"notes.txt": "precious\n"}
    assert [p.name for p in (out / "leaf1").iterdir()] == []


@pytest.mark.parametrize("plan_json", ['{"name": "something else"}', "not json", "[]",
                                        '{"lab": "x", "nodes": []}'])
def test_a_foreign_plan_json_is_not_taken_for_a_render(tmp_path, plan_json):
    out = tmp_path / "other"
    out.mkdir()
    (out / "plan.json").write_text(plan_json)
    assert_refused(render_into("clos-2x4.yaml", out), out, "plan.json is not a rocelab plan")
    assert files_under(out) == {"plan.json": plan_json}


@pytest.mark.parametrize("extra, named", [("README.md", "README.md"), ("leaf1/notes.txt", "leaf1/notes.txt"),
                                          ("leaf1/ospfd.conf", "leaf1/ospfd.conf"),
                                          ("leaf99/bgpd.conf", "leaf99")])  # no node leaf99
def test_an_earlier_render_with_foreign_files_is_refused_and_untouched(tmp_path, extra, named):
    out = tmp_path / "r"
    assert render_into("clos-8x16.yaml", out).exit_code == 0
    before = files_under(out)
    (out / extra).parent.mkdir(exist_ok=True)
    (out / extra).write_text("not rocelab's\n")
    assert_refused(render_into("clos-2x4.yaml", out), out, f"holds {named},", "no rocelab render wrote")
    assert files_under(out) == before | {extra: "not rocelab's\n"}  # the earlier render is intact too


def test_a_symlinked_config_is_refused_and_its_target_kept(tmp_path):
    out, target = tmp_path / "r", tmp_path / "elsewhere.conf"
    assert render_into("clos-2x4.yaml", out).exit_code == 0
    target.write_text("someone's\n")
    (out / "leaf1" / "zebra.conf").unlink()
    (out / "leaf1" / "zebra.conf").symlink_to(target)
    assert_refused(render_into("clos-2x4.yaml", out), out, "leaf1/zebra.conf")
    assert target.read_text() == "someone's\n" and (out / "leaf1" / "zebra.conf").is_symlink()


def test_a_file_where_the_directory_should_be_is_refused(tmp_path):
    out = tmp_path / "f"
    out.write_text("x")
    with pytest.raises(RocelabError, match="is not a directory"):
        render.write(load_topology(ROOT / "topologies" / "clos-2x4.yaml")[2], out)
    assert out.read_text() == "x"


@pytest.mark.parametrize("topology", TOPOLOGIES, ids=lambda p: p.stem)
def test_every_config_a_render_writes_is_one_a_later_render_may_replace(topology):
    rendered = load_topology(topology)[2]
    assert {name for files in rendered.files.values() for name in files} <= render.RENDERED_CONFS


def test_render_shows_the_shape_speeds_and_oversubscription(tmp_path):
    res = render_into("clos-3tier.yaml", tmp_path / "r")
    assert res.exit_code == 0, res.output
    assert "2 superspines over 2 pods of 2 spines x 2 leaves, 8 hosts; links 400G, 800G" in res.output
    assert "oversubscription (down:up capacity): spine1..spine4 (4) 1:1, leaf1..leaf4 (4) 0.5:1" \
        in res.output
    js = rocelab("render", str(ROOT / "topologies/clos-2x4-custom.yaml"), "-o",
                 str(tmp_path / "j"), "--json")
    assert json.loads(js.output)["oversubscription"] == {"leaf1": 0.25, "leaf2": 0.25,
                                                        "leaf3": 0.333}
