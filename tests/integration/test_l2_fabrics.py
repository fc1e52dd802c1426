"""fabric: l2 and fabric: evpn for real: kernel STP and bridges, FRR EVPN over VXLAN.

l2-2x4: spine1 wins the root election, exactly spine2's ports to leaf2-4 block,
every host reaches every other, a KV transfer arrives intact, a failed leaf
uplink is routed around by STP (seconds: listening + learning) and healed.
evpn-2x4: every VTEP sees every other (type-3 routes), hosts reach each other
across VXLAN at full MTU, a transfer is intact, and a MAC table limit keeps
the bridge from learning more.
"""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from emulator import bridge, netns, procs, state
from emulator.engine import client
from emulator.engine.job import Job, Op
from emulator.paths import node_run_dir

from .conftest import PREFIX, cli, make_lab, poll


@pytest.fixture(scope="module")
def l2():
    yield from make_lab("topologies/l2-2x4.yaml", f"{PREFIX}l2")


@pytest.fixture(scope="module")
def evpn():
    yield from make_lab("topologies/evpn-2x4.yaml", f"{PREFIX}evpn")


def _transfer(plan, src: str, dst: str, size: int = 8 << 20) -> dict:
    a, b = plan.node(src), plan.node(dst)
    client.ensure_engines(plan, [a, b])
    return dict(client.transfer(plan, a, b, Job(Op.WRITE, size=size, qps=2, timeout_s=30)))


def test_l2_spanning_tree_is_the_planned_one(l2):
    st = l2.status()
    assert st["converged"] and st["healthy"] and st["fabric"] == "l2"
    assert st["routers"] == [] and st["evpn"] == []
    bridges = {b["node"]: b for b in st["bridges"]}
    assert [n for n, b in bridges.items() if b["is_root"]] == ["spine1"]
    blocked = {(n, p) for n, b in bridges.items() for p in b["blocked"]}
    assert blocked == {("spine2", "leaf2"), ("spine2", "leaf3"), ("spine2", "leaf4")}
    assert all(p["role"] == "root" for n, b in bridges.items() if n != "spine1"
               for p in b["ports"] if p["port"] == ("leaf1" if n == "spine2" else "spine1"))
    assert {b["root"] for b in bridges.values()} == {bridges["spine1"]["bridge_id"]}
    assert bridges["leaf1"]["macs_learned"] >= 8  # every host MAC after the reach check
    # No FRR at all on an l2 fabric: no configs, no daemons.
    assert not any((node_run_dir(l2.name, n.name) / "zebra.conf").exists() for n in l2.plan.routers)
    assert not [pid for pid, tag in procs.tagged_processes().items() if tag == l2.name]


def test_l2_status_human_output_names_the_tree(l2):
    out = cli("status", l2.name).stdout
    assert "802.1D STP" in out and "this switch" in out and "leaf2" in out


def test_l2_transfer_is_intact_and_crosses_spine1(l2):
    r = _transfer(l2.plan, "prefill1", "decode3")
    assert r["integrity_ok"]
    assert {q["spine"] for q in r["qps"]} == {"spine1"}  # the tree, not ECMP


def test_l2_uplink_failure_reconverges_through_the_blocked_link(l2):
    res = cli("fail", l2.name, "link", "leaf1", "spine1", "--json", timeout=90)
    ev = json.loads(res.stdout)
    conv = ev["convergence"]
    assert conv["settled"]
    # 802.1D: the new path forwards only after listening + learning (2 x forward delay).
    assert conv["converge_s"] >= 2 * l2.plan.l2.forward_delay_s
    st = l2.status()
    assert st["converged"] and not st["healthy"]
    bridges = {b["node"]: b for b in st["bridges"]}
    # spine2 now reaches the root through another leaf; leaf1 reaches it through spine2.
    assert next(p for p in bridges["leaf1"]["ports"] if p["port"] == "spine2")["role"] == "root"
    assert len([p for b in bridges.values() for p in b["blocked"]]) == 2  # one link fewer to block
    # The tree has settled; the bridges' forwarding tables may still hold an entry from
    # before (a CI run's engine connect timed out once, 10 s of SYNs): wait for the
    # path itself, then move data over it.
    decode3 = l2.plan.node("decode3").address
    poll(lambda: l2.exec("prefill1", "ping", "-c", "1", "-W", "1", decode3,
                         check=False).returncode == 0, timeout=30, what="prefill1 -> decode3")
    assert _transfer(l2.plan, "prefill1", "decode3")["integrity_ok"]
    heal = json.loads(cli("heal", l2.name, "--all", "--json", timeout=90).stdout)
    assert heal["convergence"]["settled"]
    assert l2.status()["healthy"]


def test_l2_status_exits_6_while_the_tree_is_still_moving(l2):
    """A command that found something wrong exits non-zero: right after a failure the
    spanning tree is listening and learning for seconds, and `status` says so with 6."""
    cli("fail", l2.name, "link", "leaf2", "spine1", "--no-wait")
    res = cli("status", l2.name, "--json", check=False)
    assert res.returncode == 6
    st = json.loads(res.stdout)
    assert not st["converged"] and any(not b["converged"] for b in st["bridges"])
    cli("heal", l2.name, "--all", timeout=90)
    assert l2.status()["healthy"]


def test_evpn_every_vtep_sees_every_other(evpn):
    st = evpn.status()
    assert st["converged"] and st["healthy"] and st["fabric"] == "evpn"
    loopbacks = {n.name: n.loopback for n in evpn.plan.of_kind(evpn.plan.node("leaf1").kind)}
    for v in st["evpn"]:
        assert v["vni"] == 10100 and v["vtep"] == loopbacks[v["node"]]
        assert v["remote_vteps"] == sorted(ip for n, ip in loopbacks.items() if n != v["node"])
        assert v["type3"] == 4  # one inclusive-multicast route per VTEP
        assert v["type2"] >= 8  # every host MAC, after the reach check's pings
    assert all(r["sessions_up"] == r["sessions_configured"] for r in st["routers"])


def test_evpn_full_mtu_crosses_vxlan(evpn):
    # 9000-byte host frames in VXLAN: the underlay runs at 9050.
    res = evpn.exec("prefill1", "ping", "-c", "1", "-W", "2", "-M", "do", "-s", "8972",
                    evpn.plan.node("decode4").address)
    assert res.returncode == 0


def test_evpn_transfer_is_intact(evpn):
    r = _transfer(evpn.plan, "prefill2", "decode2")
    assert r["integrity_ok"] and r["bytes"] == 8 << 20


def test_evpn_leaf_bridges_host_ports_and_the_vxlan_device(evpn):
    plan = evpn.plan
    leaf = plan.node("leaf1")
    with netns.entered(leaf.netns):
        st = bridge.bridge_state(leaf, plan.l2)
    assert {p.port for p in st["ports"]} == {"prefill1", "prefill2", plan.l2.vxlan}


@pytest.mark.parametrize("which", ["l2", "evpn"])
def test_metrics_top_and_kv_work_on_bridged_fabrics(which, request):
    lab_ = request.getfixturevalue(which)
    scrape = cli("metrics", lab_.name, "--once").stdout
    sent = {(s.labels["node"], s.labels["port"]): s.value for fam in text_string_to_metric_families(scrape)
            for s in fam.samples if s.name == "rocelab_interface_tx_bytes_total"}
    assert {n for n, _ in sent} == {n.name for n in lab_.plan.nodes}  # every node's ports
    assert sent[("leaf1", "spine1")] > 0  # the reach check's frames went up leaf1's uplink
    bgp_up = [line for line in scrape.splitlines() if line.startswith("rocelab_bgp_daemon_up")]
    assert bool(bgp_up) is (which == "evpn")  # no FRR on an l2 fabric, underlay FRR on evpn
    top = cli("top", lab_.name, "--once", "--interval", "0.5").stdout
    assert "hottest ports" in top and lab_.name in top
    kv = json.loads(cli("kv", lab_.name, "--tokens", "32", "--requests", "2", "--json").stdout)
    assert kv["aggregate"]["transfers"] == 2 and kv["aggregate"]["integrity_ok"] is True
    assert len(kv["requests"]) == 2 and all(r["integrity_ok"] is True for r in kv["requests"])


def test_congestion_plane_on_an_evpn_fabric():
    """Shaped ports, ECN and PFC on an EVPN lab: RoCE rides VXLAN with its DSCP (tos inherit)."""
    from emulator import lab as lab_mod
    from emulator.congestion.maps import StatsReader

    topo = {"name": f"{PREFIX}evcc", "fabric": "evpn",
            "congestion": {"enabled": True, "max_link_rate": "100M"}}
    try:
        lab_mod.up(topo)
        plan = state.lab_plan(topo["name"])
        a, b = plan.node("prefill1"), plan.node("decode1")
        client.ensure_engines(plan, [a, b])
        r = client.transfer(plan, a, b, Job(Op.WRITE, size=4 << 20, qps=2, timeout_s=60))
        assert r["integrity_ok"]
        stats = StatsReader(plan)
        try:
            rows = stats.read()
        finally:
            stats.close()
        # The leaf's uplinks carried the transfer in the lossless class (TC 3): the outer
        # VXLAN header inherited the RoCE DSCP.
        uplinks = {p.name for p in plan.node("leaf1").interfaces if p.fabric}
        tc3 = sum(row.values["tx_bytes"] for row in rows
                  if row.node == "leaf1" and row.port in uplinks and row.tc == 3)
        assert tc3 >= 4 << 20
    finally:
        lab_mod.down(topo["name"])


def test_evpn_uplink_failure_reroutes_the_underlay(evpn):
    """A leaf uplink fails under the overlay: the underlay's ECMP toward every other VTEP
    shrinks to the surviving spine, EVPN keeps every remote VTEP, and a transfer is intact."""
    ev = json.loads(cli("fail", evpn.name, "link", "leaf1", "spine1", "--json").stdout)
    assert ev["convergence"]["settled"] and ev["convergence"]["converge_s"] < 2.0
    assert ev["convergence"]["leaf_ecmp"]["leaf1"] == [1, 1]  # toward the 3 other VTEPs
    st = evpn.status()
    assert st["converged"] and not st["healthy"]
    assert all(len(v["remote_vteps"]) == 3 for v in st["evpn"])
    assert _transfer(evpn.plan, "prefill1", "decode3")["integrity_ok"]
    heal = json.loads(cli("heal", evpn.name, "--all", "--json").stdout)
    assert heal["convergence"]["settled"]
    assert evpn.status()["healthy"]


def test_list_judges_an_l2_lab_by_its_spanning_tree(l2):
    def health() -> str:
        rows = json.loads(cli("list", "--json").stdout)
        return next(r["health"] for r in rows if r["name"] == l2.name)

    assert health() == "healthy"
    l2.exec("spine2", "ip", "link", "set", "leaf2", "down")  # behind rocelab's back
    try:
        assert health() == "not-converged"
    finally:
        l2.exec("spine2", "ip", "link", "set", "leaf2", "up")
    poll(lambda: health() == "healthy", timeout=30, interval=0.5, what="the tree to settle again")
