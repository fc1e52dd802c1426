"""Multi-plane fabrics for real: clos-2p-2x4 (2 planes of 2 spines x 2 leaves, every host a
NIC on each plane).

Every plane's BGP converges to the widths the plan computes (a router holds its own plane's
prefixes only); a 2-QP transfer puts one QP on each plane and bytes on each plane's NICs
and spines; `fail plane 1` (carrier loss, then silent) leaves plane 0 carrying an intact
transfer while plane 1 carries nothing, and `heal plane 1` makes the fabric whole again.
clos-2p-2x4-cc (shaped): two planes carry about twice what one does, and plane 0 keeps
its rate while plane 1 is failed (ratios against a baseline measured in the same test).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from emulator import converge, faults, forwarding, state
from emulator.engine import client
from emulator.engine.job import Job, Op
from emulator.frr import vtysh_json

from .conftest import PREFIX, cli, make_lab, poll

running = contextlib.contextmanager(make_lab)  # a lab for one test, down whatever happens


@pytest.fixture(scope="module")
def planes():
    yield from make_lab("topologies/clos-2p-2x4.yaml", f"{PREFIX}2p")


def _transfer(plan, qps: int, size: int = 8 << 20) -> dict:
    a, b = plan.node("prefill1"), plan.node("decode1")
    client.ensure_engines(plan, [a, b])
    return dict(client.transfer(plan, a, b, Job(Op.WRITE, size=size, qps=qps, timeout_s=60)))


def _plane_tx(lab) -> dict[int, int]:
    return {r["plane"]: r["tx_bytes"] for r in lab.status()["rails"]}


def _spine_tx(plan) -> dict[str, int]:
    """Bytes each spine has sent down to its leaves (kernel counters)."""
    return {s.name: sum(c["tx_bytes"] for port, c in forwarding.port_counters(s).items()
                        if port in {p.name for p in s.interfaces})
            for s in plan.spines}


def _ping(lab, dst_ip: str) -> bool:
    res = lab.exec("prefill1", "ping", "-c", "2", "-i", "0.2", "-W", "1", dst_ip, check=False)
    return " 0% packet loss" in res.stdout


def test_every_plane_converges_with_its_own_ecmp(planes):
    plan = state.lab_plan(planes.name)
    have = converge.fib_widths(plan)
    assert have == plan.expected_widths()
    nic0, nic1 = (plan.host_prefix(plan.node("decode1")),
                  str(plan.node("decode1").interfaces[1].address).rsplit(".", 1)[0] + ".0/31")
    assert have["p0leaf1"][nic0] == 2 and have["p1leaf1"][nic1] == 2  # both spines of the plane
    assert nic1 not in have["p0leaf1"] and nic0 not in have["p1spine1"]
    st = planes.status()
    assert st["healthy"] and st["shape"] == "2 planes of 2 spines x 2 leaves"
    assert [(r["plane"], r["spines"]) for r in st["rails"]] == [
        (0, ["p0spine1", "p0spine2"]), (1, ["p1spine1", "p1spine2"])]
    for ip in plan.node("decode1").addresses:  # each plane reaches the host's NIC on it
        assert _ping(planes, ip), ip


def test_a_two_qp_transfer_moves_bytes_on_both_planes(planes):
    plan = state.lab_plan(planes.name)
    before, spines_before = _plane_tx(planes), _spine_tx(plan)
    result = _transfer(plan, qps=2, size=16 << 20)
    assert result["integrity_ok"]
    assert sorted(q["rail"] for q in result["qps"]) == [0, 1]
    assert {q["local_ip"] for q in result["qps"]} == set(plan.node("prefill1").addresses)
    for q in result["qps"]:  # QP k crossed a spine of plane k (forwarding.egress_port per plane)
        assert q["spine"] in {s.name for s in plan.plane_nodes(q["rail"])}, q
    after, spines_after = _plane_tx(planes), _spine_tx(plan)
    sent = {k: after[k] - before[k] for k in after}
    assert all(sent[k] > 7e6 for k in (0, 1)), sent  # half of the 16 MiB each, headers on top
    for k in (0, 1):
        crossed = sum(spines_after[s] - spines_before[s] for s in spines_after
                      if s.startswith(f"p{k}"))
        assert crossed > 7e6, (k, spines_after, spines_before)


def _sessions_up(plan, router: str) -> int:
    peers = vtysh_json(plan.lab, router, "show bgp summary json").get("ipv4Unicast", {})
    return sum(1 for p in peers.get("peers", {}).values() if p.get("state") == "Established")


@pytest.mark.parametrize("silent", [False, True], ids=["carrier", "silent"])
def test_a_failed_plane_leaves_the_other_carrying_and_heal_restores(planes, silent):
    plan = state.lab_plan(planes.name)
    how = ["--silent", "--no-wait"] if silent else []
    event = json.loads(cli("fail", planes.name, "plane", "1", *how, "--json").stdout)
    try:
        assert (event["fault"], event["plane"], event["silent"]) == ("plane", 1, silent)
        assert event["after"]["failed_nodes"] == ["p1spine1", "p1spine2"]
        if silent:  # carrier stays up: plane 1's sessions too, until the hold timer
            assert _sessions_up(plan, "p1leaf1") == 2
        else:
            assert event["convergence"]["settled"]
            assert event["convergence"]["leaf_ecmp"]["p1leaf1"] == [0, 0]
        one_qp = _transfer(plan, qps=1)  # QP 0: NIC 0 at both ends, plane 0
        assert one_qp["integrity_ok"] and one_qp["qps"][0]["spine"].startswith("p0spine")
        decode1 = plan.node("decode1").addresses
        assert _ping(planes, decode1[0]) and not _ping(planes, decode1[1])
        assert converge.check_reach_hosts(plan.hosts) == []  # every host's NIC 0: plane 0
        reach = converge.check_reach(plan)  # status/validate: every plane, so plane 1 shows
        assert not reach.ok and "prefill1 cannot reach decode1" in reach.problems, reach
        p0 = [r.name for r in plan.plane_nodes(0)]
        widths = converge.fib_widths(plan)
        healthy = plan.expected_widths()
        assert {r: widths[r] for r in p0} == {r: healthy[r] for r in p0}  # plane 0 untouched
        active = planes.status()["faults"]
        assert [f["name"] for f in active] == ["plane 1"]
    finally:
        cli("heal", planes.name, "plane", "1")
    poll(lambda: converge.fib_widths(plan) == plan.expected_widths(), what="both planes whole")
    assert _ping(planes, plan.node("decode1").addresses[1])
    assert _transfer(plan, qps=2)["integrity_ok"]


def test_a_plane_the_lab_lacks_is_one_line_naming_the_range(planes):
    res = cli("fail", planes.name, "plane", "2", check=False)
    assert res.returncode == 4
    assert res.stderr.strip().splitlines()[-1].endswith("planes are 0..1")
    assert "plane:" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert json.loads(cli("status", planes.name, "--json", check=False).stdout)["faults"] == []


def test_shaped_two_planes_carry_twice_one_and_a_lost_plane_spares_the_other():
    with running("topologies/clos-2p-2x4-cc.yaml", f"{PREFIX}2pcc") as lab:
        plan = state.lab_plan(lab.name)
        one, two = _transfer(plan, qps=1), _transfer(plan, qps=2)  # 1 plane, then both
        assert one["integrity_ok"] and two["integrity_ok"]
        assert two["goodput_gbps"] > 1.5 * one["goodput_gbps"], (one, two)
        cli("fail", lab.name, "plane", "1")
        try:
            during = _transfer(plan, qps=1)  # plane 0 alone, its capacity untouched
            assert during["integrity_ok"] and during["qps"][0]["spine"].startswith("p0")
            assert during["goodput_gbps"] > 0.7 * one["goodput_gbps"], (one, during)
        finally:
            cli("heal", lab.name, "plane", "1")


PLANE_EXPERIMENT = """\
name: plane-loss
topology: {topology}
duration: 60s
flows:
  - {{name: p0, src: prefill1, dst: decode1, qps: 1, size: 64MiB}}
actions:
  - {{at: 0.3s, fault: {{fail: plane, plane: 1}}}}
  - {{at: 1s, fault: {{heal: plane, plane: 1}}}}
"""


def test_an_experiment_fails_and_heals_a_plane_on_its_timeline(planes, tmp_path):
    """On the module's lab (the file's topology, running: the run uses it as it is and
    leaves it up, whole again after the timeline's heal)."""
    spec = tmp_path / "plane-loss.yaml"
    spec.write_text(PLANE_EXPERIMENT.format(topology=Path("topologies/clos-2p-2x4.yaml").resolve()))
    out = tmp_path / "out"
    try:
        cli("run", str(spec), "--out", str(out), "--name", planes.name, timeout=240)
    finally:
        if faults.active(planes.plan):  # the timeline failed to heal it: heal for the next test
            cli("heal", planes.name, "--all", check=False)
    r = json.loads((out / "results.json").read_text())
    fail, heal = r["events"]
    assert (fail["action"], fail["fault"], fail["plane"], heal["action"]) == (
        "fail", "plane", 1, "heal")
    assert fail["after"]["failed_nodes"] == ["p1spine1", "p1spine2"]
    assert fail["convergence"]["leaf_ecmp"]["p1leaf1"] == [0, 0]
    assert heal["convergence"]["settled"]
    assert r["integrity_ok"]  # the flow's one QP is on plane 0: untouched
