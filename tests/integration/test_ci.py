"""The interface automated topology tests use: exit codes, wait, validate, run's expect:,
the public Python API and the pytest plugin, each on real labs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from emulator import Lab
from emulator.errors import ConvergeTimeout, ExitCode, LabNotFoundError

from .conftest import PREFIX, cli, leftovers, make_lab

TINY = {"spines": 2, "leaves": 2, "hosts": {"per_leaf": 1}}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    topo = tmp_path_factory.mktemp("topo") / "small.yaml"
    topo.write_text(yaml.safe_dump(TINY | {"name": f"{PREFIX}small", "validate": {
        "leaf1-both-spines": {"ecmp": {"node": "leaf1", "to": "decode1", "width": 2}},
        "spine1-leaf1": {"session": {"node": "spine1", "peer": "leaf1"}},
        "kv": {"transfer": {"src": "prefill1", "dst": "decode1", "size": "2MiB"}}}}))
    yield from make_lab(str(topo), f"{PREFIX}small")


def test_validate_passes_on_a_healthy_lab_and_writes_junit(small, tmp_path):
    junit = tmp_path / "v.xml"
    res = cli("validate", small.name, "--json", "--junit", str(junit))
    checks = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
    assert set(checks) == {"fib", "bgp", "reach", "mtu", "roce", "congestion", "expect:kv",
                           "expect:leaf1-both-spines", "expect:spine1-leaf1"}
    assert all(c["ok"] for c in checks.values()) and checks["congestion"]["skipped"]
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("9", "0", "1")


def test_a_fault_keeps_the_lab_converged_but_fails_its_expectations(small, tmp_path):
    cli("fail", small.name, "link", "leaf1", "spine1")
    try:
        st = json.loads(cli("status", small.name, "--json").stdout)  # exit 0: converged
        assert st["converged"] and not st["healthy"]
        assert cli("wait", small.name, "--until", "converged", "--timeout", "5").returncode == 0
        waited = cli("wait", small.name, "--until", "healthy", "--timeout", "1", check=False)
        assert waited.returncode == ExitCode.NOT_CONVERGED and "not healthy" in waited.stderr
        res = cli("validate", small.name, "--junit", str(tmp_path / "v.xml"), check=False)
        assert res.returncode == ExitCode.VALIDATION_FAILED, res.stdout
        assert "FAIL  expect:leaf1-both-spines" in res.stdout and "pass  fib" in res.stdout
        suite = ET.parse(tmp_path / "v.xml").getroot()
        assert suite.get("failures") == "2"  # the ECMP width and the session
    finally:
        cli("heal", small.name, "--all")
    assert cli("wait", small.name, "--until", "healthy", "--timeout", "20").returncode == 0


def test_status_exits_6_when_a_bgpd_died(tmp_path):
    """Killed with SIGKILL, spine1's bgpd takes its routes with it: not converged."""
    name = f"{PREFIX}bgpd"
    topo = tmp_path / "t.yaml"
    topo.write_text(yaml.safe_dump(TINY | {"name": name}))
    for _ in make_lab(str(topo), name):
        os.kill(int(Path(f"/run/rocelab/{name}/spine1/bgpd.pid").read_text()), signal.SIGKILL)
        res = cli("status", name, check=False)
        assert res.returncode == ExitCode.NOT_CONVERGED, res.stdout
        assert "NOT converged" in res.stdout and "spine1" in res.stdout
        st = json.loads(cli("status", name, "--json", check=False).stdout)
        assert st["converged"] is False and st["healthy"] is False
        res = cli("validate", name, "--check", "bgp,fib", check=False)
        assert res.returncode == ExitCode.VALIDATION_FAILED and "FAIL  bgp" in res.stdout
        res = cli("wait", name, "--timeout", "1", "--json", check=False)
        assert res.returncode == ExitCode.NOT_CONVERGED
        assert json.loads(res.stdout)["error"]["code"] == ExitCode.NOT_CONVERGED


def test_run_exits_11_when_an_expectation_fails_and_the_report_shows_it(small, tmp_path):
    exp = tmp_path / "e.yaml"
    exp.write_text(yaml.safe_dump({
        "name": "ci-expect", "topology": str(Path(small.topology).resolve()), "duration": "30s",
        "flows": [{"name": "f1", "src": "prefill1", "dst": "decode1", "size": "4MiB"}],
        "expect": ["flows.*.integrity_ok", "flows.f1.goodput_bps > 1e15"]}))
    assert cli("check", str(exp)).returncode == 0
    res = cli("run", str(exp), "--out", str(tmp_path / "out"), "--name", small.name, check=False)
    assert res.returncode == ExitCode.EXPECTATION_FAILED, res.stderr
    assert "FAIL flows.f1.goodput_bps > 1e15" in res.stdout.replace("  ", " ")
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [e["ok"] for e in results["expectations"]] == [True, False]
    assert "flows.f1.goodput_bps > 1e15" in (tmp_path / "out" / "report.md").read_text()


def test_the_python_api(small):
    lab = Lab.attach(small.name)
    assert lab.status()["healthy"] and lab.ecmp("leaf1", "decode1") == 2
    with pytest.raises(LabNotFoundError, match="no node 'leaf9'"):
        lab.ecmp("leaf9", "decode1")
    event = lab.fail_node("spine2")
    try:
        assert event["convergence"]["settled"] and lab.ecmp("leaf1", "decode1") == 1
        res = lab.transfer("prefill1", "decode1", size="4MiB", qps=2)
        assert res["integrity_ok"] and {q["spine"] for q in res["qps"]} == {"spine1"}
        assert lab.vtysh("spine1", "show bgp summary json", json=True)["ipv4Unicast"]["as"] == 65000
        assert "10.2.1.1" in lab.exec("decode1", ["ip", "-4", "addr"], check=True).stdout
    finally:
        healed = lab.heal()
    assert healed["convergence"]["settled"] and lab.ecmp("leaf1", "decode1") == 2
    assert all(c.ok for c in lab.validate(["fib", "bgp"]))


def test_lab_up_from_a_dict_always_comes_down():
    name = f"{PREFIX}api"
    with pytest.raises(ConvergeTimeout):
        with Lab.up(TINY | {"name": name}) as lab:
            assert lab.status()["healthy"] and lab.topology.spines == 2
            lab.fail_node("spine1")
            lab.wait("healthy", timeout_s=0.5)  # raises: a failed spine is not healthy
    assert not leftovers(name)


PLUGIN_SUITE = '''
import pytest
pytestmark = pytest.mark.rocelab
TOPO = {topo!r}

def test_up_once(rocelab_lab):
    assert rocelab_lab(TOPO).status()["healthy"]

def test_same_lab_again(rocelab_lab):
    lab = rocelab_lab(TOPO)
    assert lab is rocelab_lab(TOPO) and lab.name == TOPO["name"]

def test_a_failing_test_still_tears_down(rocelab_lab):
    rocelab_lab(TOPO).fail_link("leaf1", "spine1")
    assert False, "fails on purpose"
'''


def test_the_pytest_plugin_tears_labs_down_and_reports_leaks(pytester):
    name = f"{PREFIX}plug"
    pytester.makepyfile(test_suite=PLUGIN_SUITE.format(topo=TINY | {"name": name}))
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=180)
    res.assert_outcomes(passed=2, failed=1)
    assert not leftovers(name)
    leak = PLUGIN_SUITE.format(topo=TINY | {"name": name}).split("def test_same")[0] + '''
def test_leaks(rocelab_lab):
    lab = rocelab_lab(TOPO)
    import subprocess
    subprocess.run(["ip", "netns", "add", lab.name + "-leak"], check=True)  # not the lab's
'''
    pytester.makepyfile(test_suite=leak)
    res = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=180)
    try:
        assert res.ret != 0 and "leaked" in res.stdout.str() and f"{name}-leak" in res.stdout.str()
    finally:  # the one namespace this test made by hand
        subprocess.run(["ip", "netns", "delete", f"{name}-leak"], check=False)
