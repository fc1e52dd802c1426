"""The fabric model for real: 3-tier, rail-optimized and dual-homed fabrics, parallel links.

clos-3tier: BGP converges with the ECMP width the plan computes at every tier (leaf,
spine, superspine), and a superspine failure narrows only the spines' cross-pod width.
rail-4x8: one KV transfer over 8 QPs puts bytes on every rail (each host NIC's kernel
counters), intact. clos-2x4-dual: a host on two leaves stays reachable, and a transfer
to it completes, while one of its leaves is failed. clos-2x4-custom: parallel uplinks
give 4-wide ECMP, the border leaf's maximum-paths 2 holds, spines hash on L3 only.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess

import pytest

from emulator import converge, state
from emulator.engine import client
from emulator.engine.job import Job, Op

from .conftest import PREFIX, cli, make_lab

running = contextlib.contextmanager(make_lab)  # a lab for one test, down whatever happens


@pytest.fixture(scope="module")
def three_tier():
    yield from make_lab("topologies/clos-3tier.yaml", f"{PREFIX}3t")


def _transfer(plan, src: str, dst: str, size: int = 8 << 20, qps: int = 2) -> dict:
    a, b = plan.node(src), plan.node(dst)
    client.ensure_engines(plan, [a, b])
    return dict(client.transfer(plan, a, b, Job(Op.WRITE, size=size, qps=qps, timeout_s=60)))


def _widths(plan) -> dict[str, dict[str, int]]:
    return converge.fib_widths(plan)


def test_three_tier_converges_with_the_planned_ecmp_at_every_tier(three_tier):
    plan = state.lab_plan(three_tier.name)
    have, want = _widths(plan), plan.expected_widths()
    assert have == want
    decode1 = plan.host_prefix(plan.node("decode1"))
    # leaf -> both pod spines, spine -> both superspines, superspine -> both spines of pod 2
    assert (have["leaf1"][decode1], have["spine1"][decode1], have["super1"][decode1]) == (2, 2, 2)
    st = three_tier.status()
    assert st["healthy"] and st["shape"].startswith("2 superspines over 2 pods")
    result = _transfer(plan, "prefill1", "decode1")
    assert result["integrity_ok"]


def test_three_tier_superspine_failure_narrows_the_spines_only(three_tier):
    plan = state.lab_plan(three_tier.name)
    decode1 = plan.host_prefix(plan.node("decode1"))
    cli("fail", three_tier.name, "node", "super1")
    try:
        have = _widths(plan)
        del have["super1"]  # failed: its own FIB is not asked
        assert have == plan.expected_widths(dead=frozenset({"super1"}))
        assert have["spine1"][decode1] == 1 and have["leaf1"][decode1] == 2
    finally:
        cli("heal", three_tier.name, "--all")
    assert _widths(plan) == plan.expected_widths()


def test_rail_transfer_uses_every_rail(rail_4x8):
    lab = rail_4x8  # shared with test_kv_serving (conftest): bytes counted over this transfer
    plan = state.lab_plan(lab.name)
    before = {r["rail"]: r["tx_bytes"] for r in lab.status()["rails"]}
    result = _transfer(plan, "prefill1", "decode1", size=16 << 20, qps=8)
    assert result["integrity_ok"]
    assert sorted({q["rail"] for q in result["qps"]}) == [0, 1, 2, 3]
    assert {q["local_ip"] for q in result["qps"]} == set(plan.node("prefill1").addresses)
    after = {r["rail"]: r["tx_bytes"] for r in lab.status()["rails"]}
    sent = {rail: after[rail] - before.get(rail, 0) for rail in after}
    # each rail carries a quarter of the 16 MiB (QPs 0-7 over 4 NICs), headers on top
    assert all(sent[rail] > 3.5e6 for rail in range(4)), sent


def test_dual_homed_host_survives_a_leaf_failure():
    with running("topologies/clos-2x4-dual.yaml", f"{PREFIX}dual") as lab:
        plan = state.lab_plan(lab.name)
        target = plan.node("prefill1")
        cli("fail", lab.name, "node", "leaf1")
        try:
            have = _widths(plan)
            del have["leaf1"]
            assert have == plan.expected_widths(dead=frozenset({"leaf1"}))
            ping = lab.exec("decode1", "ping", "-c", "3", "-i", "0.2", "-W", "1", target.address)
            assert " 0% packet loss" in ping.stdout
            assert _transfer(plan, "prefill1", "decode1")["integrity_ok"]
        finally:
            cli("heal", lab.name, "--all")


def test_parallel_links_border_leaf_and_l3_hash():
    with running("topologies/clos-2x4-custom.yaml", f"{PREFIX}cust") as lab:
        plan = state.lab_plan(lab.name)
        have = _widths(plan)
        assert have == plan.expected_widths()
        assert set(have["leaf3"].values()) == {4} and set(have["leaf4"].values()) == {2}
        spine = lab.exec("spine1", "sysctl", "-n", "net.ipv4.fib_multipath_hash_policy")
        leaf = lab.exec("leaf1", "sysctl", "-n", "net.ipv4.fib_multipath_hash_policy")
        assert (spine.stdout.strip(), leaf.stdout.strip()) == ("0", "1")
        assert lab.status()["healthy"]
        # RoCE's entropy problem: with an L3 hash every QP between two hosts takes one of
        # spine1's two parallel links to leaf2; the leaves' L4 hash spreads them.
        src, dst = plan.node("prefill1"), plan.node("decode1")

        def devs(node: str, iif: str) -> set[str]:  # `ip -n`: 32 lookups, not 32 `rocelab exec`s
            return {json.loads(subprocess.run(
                ["ip", "-n", plan.node(node).netns, "-j", "route", "get", dst.address, "from",
                 src.address, "iif", iif, "ipproto", "udp", "sport", str(sport), "dport", "4791"],
                capture_output=True, text=True, check=True).stdout)[0]["dev"]
                for sport in range(49152, 49152 + 16)}

        assert len(devs("spine1", "leaf1")) == 1
        assert len(devs("leaf1", "prefill1")) > 1


def test_each_port_is_shaped_at_its_own_speed_under_one_dilation(tmp_path):
    topo = tmp_path / "tiers.yaml"
    topo.write_text("name: tiers\nspines: 1\nleaves: 2\nhosts: {per_leaf: 1}\n"
                    "links: {speed: 400G, leaf_spine: {speed: 800G}}\n"
                    "congestion: {enabled: true, max_link_rate: 100M}\n")
    with running(str(topo), f"{PREFIX}tiers") as lab:
        plan = state.lab_plan(lab.name)
        assert plan.dilation == 8000  # the fastest link, 800G, at 100 Mbit/s

        def rate(node: str, port: str) -> str:  # the port's root HTB class (tc -j omits htb)
            out = lab.exec(node, "tc", "class", "show", "dev", port).stdout
            return re.search(r"class htb 1:1 root rate (\S+)", out).group(1)

        assert rate("leaf1", "spine1") == rate("spine1", "leaf2") == "100Mbit"
        assert rate("leaf1", "prefill1") == rate("prefill1", "eth0") == "50Mbit"  # 400G / 8000
