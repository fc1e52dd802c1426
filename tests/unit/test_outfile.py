"""Issue 24 (4): output files are written as root without following a link someone planted.

Each output a user names (`--out`, `validate --junit`, `diagnose --evidence`, `render -o`, ...)
is tried with a symlink at its name pointing to a decoy: the decoy stays byte-identical and
the link is replaced by the output (or the output is refused). `capture -w` needs a lab:
tests/integration/test_cli_tools.py has its case.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from emulator import outfile, report
from emulator.cli import main
from emulator.errors import ExitCode

ROOT = Path(__file__).resolve().parents[2]
TOPO = str(ROOT / "topologies" / "clos-2x4.yaml")
INCAST = ROOT / "tests" / "unit" / "fixtures" / "report" / "incast-results.json"
EVIDENCE = ROOT / "tests" / "unit" / "fixtures" / "diagnose"
IS_ROOT = os.geteuid() == 0
NOBODY = 65534
DECOY = b"root:x:0:0:the decoy a planted link points to\n"


@pytest.fixture
def decoy(tmp_path) -> Path:
    d = tmp_path / "decoy"
    d.write_bytes(DECOY)
    return d


def planted(at: Path, decoy: Path) -> Path:
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(decoy)
    return at


def replaced(at: Path, decoy: Path) -> None:
    assert decoy.read_bytes() == DECOY, "the decoy behind the planted link was written"
    assert not at.is_symlink() and at.is_file(), f"{at} should now be rocelab's own file"


def test_write_replaces_a_planted_link_and_leaves_no_temporary(tmp_path, decoy):
    out = planted(tmp_path / "out" / "results.json", decoy)
    outfile.write_text(out, "{}\n")
    replaced(out, decoy)
    assert out.read_text() == "{}\n" and os.listdir(out.parent) == ["results.json"]


def test_open_fresh_neither_follows_nor_truncates(tmp_path, decoy):
    link = planted(tmp_path / "cap.pcap", decoy)
    hard = tmp_path / "hard.pcap"
    os.link(decoy, hard)
    for at in (link, hard):
        with outfile.open_fresh(at) as f:
            f.write(b"pcap")
        assert at.read_bytes() == b"pcap" and not at.is_symlink()
    assert decoy.read_bytes() == DECOY


@pytest.mark.skipif(not IS_ROOT, reason="planting another user's link takes root")
def test_a_directory_or_link_of_another_user_is_refused(tmp_path, decoy):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(outfile.OutputError, match="belongs to uid 65534"):
        outfile.write_text(theirs / "report.md", "x")
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "elsewhere")
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(outfile.OutputError, match="symlink of uid 65534"):
        outfile.make_dir(link)
    assert not (tmp_path / "elsewhere").exists()


def test_validate_junit_replaces_a_planted_link(tmp_path, decoy):
    junit = planted(tmp_path / "validate.xml", decoy)
    res = CliRunner().invoke(main, ["validate", TOPO, "--junit", str(junit)])
    assert res.exit_code == 0, res.output
    replaced(junit, decoy)
    assert junit.read_text().startswith("<?xml")


def test_diagnose_evidence_replaces_a_planted_link(tmp_path, decoy):
    recorded = json.loads(gzip.decompress((EVIDENCE / "healthy-incast.json.gz").read_bytes()))
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"flows": [], "evidence": recorded}))
    evidence = planted(tmp_path / "evidence.json", decoy)
    res = CliRunner().invoke(main, ["diagnose", "--results", str(results), "--evidence", str(evidence)])
    assert res.exit_code in (0, ExitCode.FINDINGS), res.output
    replaced(evidence, decoy)
    assert json.loads(evidence.read_text())


def test_a_run_report_replaces_planted_links(tmp_path, decoy):
    """What `run --out`, `transfer --out` and `kv --out` write: results.json, plots, reports."""
    out = tmp_path / "out"
    links = [planted(out / name, decoy) for name in ("results.json", "report.md", "report.html")]
    report.save(out, json.loads(INCAST.read_text()), None)
    for link in links:
        replaced(link, decoy)
    pictures = [p for p in out.iterdir() if p.suffix in (".png", ".svg")]
    assert pictures and all(not p.is_symlink() for p in pictures)


def test_a_plot_replaces_a_planted_link(tmp_path, decoy):
    out = tmp_path / "out"
    report.save(out, json.loads(INCAST.read_text()), None)
    picture = next(p for p in sorted(out.iterdir()) if p.suffix == ".png")
    picture.unlink()
    planted(picture, decoy)
    report.write(out, json.loads(INCAST.read_text()), None)
    replaced(picture, decoy)


def test_render_refuses_or_replaces_a_planted_link(tmp_path, decoy):
    out = tmp_path / "r"
    assert CliRunner().invoke(main, ["render", TOPO, "-o", str(out)]).exit_code == 0
    conf = out / "leaf1" / "frr.conf"
    conf.unlink()
    planted(conf, decoy)
    res = CliRunner().invoke(main, ["render", TOPO, "-o", str(out)])
    assert res.exit_code in (0, ExitCode.ERROR), res.output  # a file it did not write: refused
    assert decoy.read_bytes() == DECOY


@pytest.mark.skipif(not IS_ROOT, reason="planting another user's directory takes root")
def test_run_out_refuses_another_users_directory_before_anything(tmp_path):
    """writable_out used os.access, which says yes to root everywhere."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    res = CliRunner().invoke(main, ["run", str(ROOT / "experiments" / "incast.yaml"),
                                    "--out", str(theirs / "o")])
    assert res.exit_code == ExitCode.USAGE and "belongs to uid 65534" in res.stderr, res.output
    assert list(theirs.iterdir()) == []
