"""rocelab diagnose on real runs: each experiment under experiments/diagnose/ injects one
cause, and `diagnose --results` must rank that cause first with the right node, port
and flow (the ECN-off, pause-storm and healthy cases ride on the runs test_experiments.py
already makes); live, it samples a lab moving traffic and finds it healthy, then finds
a failed link."""

from __future__ import annotations

import json
import threading

import pytest

from .conftest import PREFIX, cli

FINDINGS = 13


@pytest.fixture(scope="module")
def cc(clos_cc):
    return clos_cc  # shared: every test heals the fault its run set (experiments restore the rest)


def diagnose(*args: str, code: int | None = None) -> dict:
    res = cli("diagnose", *args, "--json", check=False, timeout=120)
    out = json.loads(res.stdout)
    if code is not None:
        assert res.returncode == code, (res.returncode, res.stderr, [
            (f["severity"], f["kind"], f["cause"]) for f in out["findings"]])
    return out


def run_and_diagnose(experiment: str, lab: str, tmp_path, *extra: str, code: int = FINDINGS
                     ) -> tuple[dict, list[dict]]:
    cli("run", f"experiments/diagnose/{experiment}.yaml", "--out", str(tmp_path), "--name", lab,
        check=False, timeout=240)
    results = json.loads((tmp_path / "results.json").read_text())
    out = diagnose("--results", str(tmp_path / "results.json"), *extra, code=code)
    return results, out["findings"]


def test_dcqcn_off_on_a_host_is_named_first(cc, tmp_path):
    _, found = run_and_diagnose("dcqcn-off-host", cc.name, tmp_path)
    first = found[0]
    assert (first["kind"], first["affected"]["hosts"]) == ("dcqcn-off-host", ["prefill2"]), found
    assert first["severity"] in ("warning", "critical")
    assert not any(f["kind"] == "dcqcn-off-host" and f["affected"]["hosts"] != ["prefill2"]
                   for f in found)  # the hosts whose DCQCN works are not accused


def test_an_ecmp_collision_names_the_spine_the_flows_and_their_ports(cc, tmp_path):
    results, found = run_and_diagnose("ecmp-collision", cc.name, tmp_path)
    first = found[0]
    assert first["kind"] == "ecmp-collision" and first["where"][:2] == ["spine2", "spine2:leaf4"]
    assert first["affected"]["flows"] == ["c1", "c2", "c3", "c4"]
    sports = {q["udp_sport"] for f in results["flows"] for q in f["qps"]}
    named = next(e for e in first["evidence"] if e["counter"] == "udp_source_ports")
    assert set(named["sports"]) == sports


def test_a_congested_spine_is_named_with_the_slower_flow(cc, tmp_path):
    _, found = run_and_diagnose("congested-spine", cc.name, tmp_path)
    first = found[0]
    assert first["kind"] == "congested-spine" and first["where"] == ["spine1", "spine1:leaf3"]
    assert "via-spine1" in first["affected"]["flows"]
    assert "via-spine2" not in first["affected"]["flows"]
    assert not any(f["kind"] == "ecmp-collision" for f in found)  # both spines carried load


def test_a_link_down_is_a_routing_finding(cc, tmp_path):
    try:
        _, found = run_and_diagnose("routing", cc.name, tmp_path)
    finally:
        cli("heal", cc.name, "--all", check=False)
    assert found[0]["kind"] == "routing" and found[0]["severity"] == "critical"
    causes = " | ".join(f["cause"] for f in found if f["kind"] == "routing")
    assert "BGP session leaf2 -> spine2 is down" in causes
    assert "BGP session spine2 -> leaf2 is down" in causes
    assert "ECMP next hop(s)" in causes  # the leaves lost a path toward leaf2's hosts


def test_a_gray_link_is_localised(cc, tmp_path):
    try:
        _, found = run_and_diagnose("gray-link", cc.name, tmp_path)
    finally:
        cli("heal", cc.name, "--all", check=False)
    first = found[0]
    assert first["kind"] == "gray-link" and first["where"][:2] == ["leaf1", "spine1"], found
    assert first["affected"]["flows"] == ["lossy"]
    assert [f for f in found if f["kind"] == "gray-link"] == [first]  # only that link


def on_own_lab(experiment: str, name: str, tmp_path) -> tuple[dict, list[dict]]:
    """An experiment whose topology is its own: its lab brought up and down by the test."""
    try:
        return run_and_diagnose(experiment, f"{PREFIX}{name}", tmp_path)
    finally:
        cli("down", f"{PREFIX}{name}", check=False)


def test_drops_in_the_lossless_class_are_named(tmp_path):
    results, found = on_own_lab("lossless-drops", "dgnopfc", tmp_path)
    assert results["lossless_drops"] > 0
    first = found[0]
    assert first["kind"] == "lossless-drops" and first["where"] == ["leaf3", "leaf3:decode1"]
    assert "PFC is off on leaf3" in first["cause"]


def test_an_mtu_mismatch_on_the_roce_path_is_named(tmp_path):
    results, found = on_own_lab("mtu-mismatch", "dgmtu", tmp_path)
    assert [f["name"] for f in results["flows"] if f["error"]] == ["through-spine2"]
    first = found[0]
    assert first["kind"] == "mtu-mismatch" and first["where"][0] == "spine2"
    assert first["affected"]["flows"] == ["through-spine2"]
    narrowed = diagnose("--results", str(tmp_path / "results.json"), "--flow", "through-spine1")
    assert not any(f["kind"] == "mtu-mismatch" and "through-spine1" in f["affected"]["flows"]
                   for f in narrowed["findings"])


def test_live_a_lab_moving_traffic_is_healthy_and_a_failed_link_is_found(cc):
    """Live mode: sample while a transfer runs (no finding above info, exit 0); then with
    a link down the same command exits 13 and names the routing problem."""
    done = threading.Event()

    def transfer():
        cli("transfer", cc.name, "--src", "prefill1", "--dst", "decode3", "--size", "16MiB",
            check=False, timeout=120)
        done.set()

    t = threading.Thread(target=transfer)
    t.start()
    healthy = diagnose(cc.name, "--window", "3s", code=0)
    t.join(120)
    assert healthy["healthy"] and all(f["severity"] == "info" for f in healthy["findings"])
    assert healthy["source"] == "live" and healthy["window_s"] >= 3
    cli("fail", cc.name, "link", "leaf4", "spine1")
    try:
        broken = diagnose(cc.name, "--window", "1s", "--src", "prefill1", "--dst", "decode3",
                          code=FINDINGS)
    finally:
        cli("heal", cc.name, "--all", check=False)
    assert not broken["healthy"] and broken["findings"][0]["kind"] == "routing"
    assert any("leaf4 -> spine1 is down" in f["cause"] for f in broken["findings"])
