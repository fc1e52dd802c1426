"""The suite's own rules (conftest.py at the root, .ci/run), tested on small suites run by
pytester: unit tests first, a failing unit stops the run, under CI a skip is a failure."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIPS = "import pytest\n\ndef test_skips():\n    pytest.skip('no root here')\n"


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    """The root conftest in a scratch tree with tests/unit and tests/integration."""
    pytester.makeconftest((ROOT / "conftest.py").read_text())
    for sub in ("tests", "tests/unit", "tests/integration"):
        (pytester.path / sub).mkdir(exist_ok=True)
    return pytester


def write(p: pytest.Pytester, rel: str, text: str) -> None:
    (p.path / rel).write_text(text)


def test_unit_tests_run_before_the_integration_tests(suite):
    write(suite, "tests/integration/test_a.py", "def test_lab():\n    pass\n")
    write(suite, "tests/unit/test_b.py", "def test_pure():\n    pass\n")
    res = suite.runpytest("tests", "-v", "-p", "no:cacheprovider")
    order = [line.split("::")[1].split()[0] for line in res.outlines if "::test_" in line]
    assert order == ["test_pure", "test_lab"]


def test_a_failing_unit_test_stops_the_run_before_the_integration_tests(suite):
    write(suite, "tests/integration/test_a.py", "def test_lab():\n    pass\n")
    write(suite, "tests/unit/test_b.py", "def test_pure():\n    assert False\n")
    res = suite.runpytest("tests", "-p", "no:cacheprovider")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*1 unit test(s) failed: the integration tests were not run*"])


def test_without_ci_a_skip_is_a_skip(suite, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    write(suite, "tests/integration/test_a.py", SKIPS)
    suite.runpytest("tests", "-p", "no:cacheprovider").assert_outcomes(skipped=1)


def test_under_ci_a_skip_fails_saying_why(suite, monkeypatch):
    monkeypatch.setenv("CI", "true")
    write(suite, "tests/integration/test_a.py", SKIPS)
    res = suite.runpytest("tests", "-p", "no:cacheprovider")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*skipped under CI*no root here*CI_MAY_SKIP*"])


def test_under_ci_a_skip_on_the_allow_list_stays_a_skip(suite, monkeypatch):
    monkeypatch.setenv("CI", "true")
    allowed = (ROOT / "conftest.py").read_text().replace(
        "CI_MAY_SKIP: dict[str, str] = {}",
        'CI_MAY_SKIP: dict[str, str] = {"tests/unit/test_a.py::test_skips": "known"}')
    suite.makeconftest(allowed)
    write(suite, "tests/unit/test_a.py", SKIPS)
    suite.runpytest("tests", "-p", "no:cacheprovider").assert_outcomes(skipped=1)


def test_an_xfail_is_not_a_skip_under_ci(suite, monkeypatch):
    monkeypatch.setenv("CI", "true")
    write(suite, "tests/unit/test_a.py",
          "import pytest\n\n@pytest.mark.xfail(strict=True)\ndef test_x():\n    assert False\n")
    suite.runpytest("tests", "-p", "no:cacheprovider").assert_outcomes(xfailed=1)


def test_ci_refuses_to_run_without_root_in_one_line():
    """.ci/run as an unprivileged user (nobody) stops before make, saying why."""
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.fail("setpriv (util-linux) is needed to run .ci/run as nobody")
        drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    else:
        drop = []
    scratch = Path(tempfile.mkdtemp(prefix="rocelab-ci-"))
    try:
        scratch.chmod(0o755)
        (scratch / ".ci").mkdir(mode=0o755)
        shutil.copy(ROOT / ".ci" / "run", scratch / ".ci" / "run")  # its own tree: no Makefile
        (scratch / ".ci" / "run").chmod(0o755)
        res = subprocess.run([*drop, "bash", str(scratch / ".ci" / "run")], capture_output=True,
                             text=True, timeout=30, cwd="/")
    finally:
        shutil.rmtree(scratch)
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and "must run as root" in res.stderr


def test_the_host_snapshot_sees_a_changed_frr_config_and_a_new_socket(tmp_path):
    """conftest's tree_digests/tree_listing: what the session compares for /etc/frr, /run/frr."""
    from tests.integration.conftest import tree_digests, tree_listing

    etc, run = tmp_path / "etc", tmp_path / "run"
    etc.mkdir()
    run.mkdir()
    (etc / "frr.conf").write_text("hostname host\n")
    (etc / "link").symlink_to("/etc/shadow")  # recorded as a link, never followed
    before, listing = tree_digests(etc), tree_listing(run)
    assert before["link"] == "-> /etc/shadow" and len(before["frr.conf"]) == 64
    (etc / "frr.conf").write_text("hostname host\nrouter bgp 1\n")  # what `write memory` would do
    (run / "zebra.vty").touch()
    assert tree_digests(etc) != before and tree_listing(run) != listing
    assert tree_digests(tmp_path / "absent") == {} and tree_listing(tmp_path / "absent") == []
