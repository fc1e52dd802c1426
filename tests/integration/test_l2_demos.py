"""The five L2-vs-L3 demos (docs/l2-vs-l3.md), each run for real, side by side.

Every demo's experiment file states its claim in `expect:` lines; each test also
asserts the direction and magnitude itself, so a demo whose file was weakened
would still fail here.

The demos whose `l3` fabric is clos-2x4-cc run with --name PREFIX-cc: their l3 fabric is
then the session's shared lab (conftest.clos_cc, PREFIX-cc-l3), used as it runs and left
up (each experiment restores what its actions touched); only their l2 fabric
(PREFIX-cc-l2) is brought up and down by the run.
"""

from __future__ import annotations

import time

from emulator import forwarding, lab, procs, state
from emulator.errors import ExitCode
from emulator.experiment import compare, runner

from .conftest import PREFIX, SHAPED

SHARED = SHAPED.removesuffix("-l3")  # the --name that makes clos_cc the l3 fabric


def _run(stem: str, name: str, keep: bool = False) -> dict:
    res, _ = runner.run_compare(f"experiments/{stem}.yaml", name=name, keep=keep)
    code, why = compare.verdict(res)
    assert code is ExitCode.OK, why
    assert all(e["ok"] for e in res["expectations"]), res["expectations"]
    return res["fabrics"]


def test_link_failure_l2_interruption_dwarfs_l3():
    f = _run("l2-vs-l3-link-failure", f"{PREFIX}linkfail")
    l3, l2 = f["l3"]["flows"][0], f["l2"]["flows"][0]
    assert l3["integrity_ok"] and l2["integrity_ok"]
    assert l2["interruption_s"] >= 10 * l3["interruption_s"]
    conv3, conv2 = (f[k]["summary"]["convergence_s"] for k in ("l3", "l2"))
    assert conv3 < 1.0  # carrier loss: ECMP shrinks at once
    assert conv2 >= 2 * 4  # 802.1D: at least listening + learning (forward_delay 4 s)


def test_bisection_l2_leaves_spine2_idle_and_loses_goodput(clos_cc):
    f = _run("l2-vs-l3-bisection", SHARED)
    spines3, spines2 = (f[k]["traffic"]["spine_bytes"] for k in ("l3", "l2"))
    kv_bytes = 2 * 8 * 4 << 20
    assert spines3["spine1"] > kv_bytes / 4 and spines3["spine2"] > kv_bytes / 4  # ECMP: both
    assert spines2["spine2"] < 1_000_000 and spines2["spine1"] >= kv_bytes  # STP: one tree
    assert f["l3"]["summary"]["goodput_bps"] > f["l2"]["summary"]["goodput_bps"]
    assert f["l2"]["summary"]["handoff_p50_s"] > f["l3"]["summary"]["handoff_p50_s"]


def test_mac_overflow_floods_kv_to_bystanders_only_on_l2(clos_cc):
    f = _run("l2-vs-l3-mac-overflow", SHARED)
    by3, by2 = (f[k]["traffic"]["bystanders"]["rx_bytes"] for k in ("l3", "l2"))
    kv_bytes = 2 * 8 << 20
    assert by2 >= kv_bytes  # every KV frame reached the bystanders as unknown unicast
    assert by3 < 1_000_000
    assert f["l2"]["summary"]["fct_max_s"] > f["l3"]["summary"]["fct_max_s"]


def test_evpn_replication_is_vteps_minus_one():
    f = _run("evpn-ingress-replication", f"{PREFIX}repl")
    assert f["l3"]["events"][0]["uplink_copies_per_frame"] < 0.1
    for label, leaves in (("evpn4", 4), ("evpn8", 8), ("evpn16", 16)):
        ev = f[label]["events"][0]
        assert ev["kind"] == "broadcast" and ev["frames"] == 1000
        # Exactly VTEPs - 1 per frame, give or take the odd control packet during the burst.
        assert round(ev["vxlan_copies_per_frame"]) == leaves - 1 == ev["remote_vteps"]
        assert ev["vxlan_packets"] >= 1000 * (leaves - 1)
        assert ev["uplink_copies_per_frame"] >= leaves - 1  # each copy leaves by one uplink


def test_storm_stays_in_the_lab_and_stops_on_time(clos_cc):
    try:
        f = _run("l2-vs-l3-storm", SHARED, keep=True)  # the l2 lab stays up to look at
        storm, quiet = f["l2"]["traffic"], f["l3"]["traffic"]
        # A loop: the one broadcast came back around. A loop-free leaf sends a broadcast up
        # each forwarding uplink once (2 here, 1 with STP on); the storm sends thousands. Not
        # a floor on the storm's size: that is the shaped rate times how long the loop stayed
        # open (wall-clock actions) and, on a loaded machine, how fast the kernel forwards.
        burst = next(e for e in f["l2"]["events"] if e["kind"] == "broadcast")
        assert burst["uplink_copies_per_frame"] >= 10, burst
        # Every host got the storm: flooding puts on a host's port what each of spine2's
        # four ports carried (~0.25 of its bytes, whatever the storm's size); measured 0.235
        # to 0.257 quiet and with busy loops on both cores.
        share = {h: b / storm["spine_bytes"]["spine2"] for h, b in storm["bystanders"]["by_host"].items()}
        assert all(v >= 0.125 for v in share.values()), share
        assert quiet["bystanders"]["rx_packets"] < 1000
        assert f["l2"]["flows"][0]["integrity_ok"]  # the victim rode it out
        plan = state.lab_plan(f"{SHARED}-l2")
        # Stopped on time: the fabric is quiet once the run returns ...
        spine = plan.node("spine1")
        before = sum(c["tx_packets"] for c in forwarding.port_counters(spine).values())
        time.sleep(1.0)
        after = sum(c["tx_packets"] for c in forwarding.port_counters(spine).values())
        assert after - before < 100  # the storm ran at ~14,000 frames/s through spine1 (quiet)
        # ... and the watchdog stood down when STP came back on.
        mine = [pid for pid, tag in procs.tagged_processes().items() if tag == plan.lab]
        assert not [p for p in mine if b"emulator.watchdog" in _cmdline(p)]
    finally:
        if f"{SHARED}-l2" in state.known_labs():  # the l3 fabric is clos_cc's: it stays up
            lab.down(f"{SHARED}-l2")


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""
