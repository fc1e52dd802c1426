"""Gray failures (issue 16): a link that stays up but loses, corrupts or slows frames has a
measured effect on a KV transfer, `heal` removes it, and the same works from an experiment."""

from __future__ import annotations

import json
import subprocess

import pytest
from pyroute2 import IPRoute

from emulator import faults, netns, state
from emulator.congestion import qos

from .conftest import cli

LINK = ("leaf1", "prefill1")


@pytest.fixture(scope="module")
def lab(clos_unnumbered):
    return clos_unnumbered  # shared: every test heals the gray fault it set


@pytest.fixture
def shaped(clos_cc):
    try:
        yield clos_cc  # the session's shaped lab (conftest.clos_cc): healed whatever the test did
    finally:
        if faults.active(clos_cc.plan):  # a `heal --all` with nothing to heal still takes ~4 s
            cli("heal", clos_cc.name, "--all", check=False)


def transfer(lab) -> dict:
    return json.loads(cli("transfer", lab.name, "--src", "prefill1", "--dst", "decode1",
                          "--size", "16MiB", "--qps", "4", "--json", timeout=240).stdout)


def effects(lab) -> set:
    return set(faults.effects.scan(state.lab_plan(lab.name)))


def test_loss_makes_roce_retransmit_and_heal_takes_it_away(lab):
    clean = transfer(lab)
    assert clean["retransmitted_packets"] == 0 and clean["integrity_ok"]
    out = cli("fail", lab.name, "link", *LINK, "--loss", "5%").stdout
    assert "gray: loss 5%" in out and "routing unchanged" in out
    st = json.loads(cli("status", lab.name, "--json", check=False).stdout)
    (f,) = st["faults"]
    assert f["loss_pct"] == 5 and not st["healthy"]
    lossy = transfer(lab)
    # The loss's effect on this unshaped lab is in what the fabric did (frames dropped, RoCE
    # resent them), not in goodput against the clean run's: both are as fast as the CPU is at
    # that moment. The slowdown is asserted on the shaped lab, flows side by side in one run
    # (test_gray_faults_in_an_experiment, experiments/gray-link.yaml).
    assert lossy["integrity_ok"] and lossy["retransmitted_packets"] > 0
    hit = json.loads(cli("status", lab.name, "--json", check=False).stdout)["faults"][0]
    assert hit["dropped_packets"] > 0  # the chain's own counter: frames it dropped
    cli("heal", lab.name, "link", *LINK)
    assert not effects(lab)
    assert transfer(lab)["retransmitted_packets"] == 0


def test_corruption_is_seen_as_bad_icrc_and_heal_takes_it_away(lab):
    cli("fail", lab.name, "link", *LINK, "--corrupt", "5%")
    bad = transfer(lab)
    assert bad["integrity_ok"] and bad["bad_icrc"] > 0 and bad["retransmitted_packets"] > 0
    cli("heal", lab.name, "link", *LINK)
    assert not effects(lab)
    assert transfer(lab)["bad_icrc"] == 0


def _capped(lab) -> bool:
    """Is the degraded optic's shaper (HTB 1f:) on leaf1's port to prefill1?"""
    qdisc = subprocess.run(["tc", "-n", f"{lab.name}-leaf1", "-j", "qdisc", "show", "dev", "prefill1"],
                           capture_output=True, text=True, check=True).stdout
    return any(q["kind"] == "htb" and q["handle"] == "1f:" for q in json.loads(qdisc))


def test_a_degraded_optic_caps_goodput_and_heal_restores_it(lab):
    cli("fail", lab.name, "link", *LINK, "--rate", "200M")
    assert _capped(lab)
    slow = transfer(lab)
    assert slow["integrity_ok"] and slow["goodput_gbps"] < 0.2  # 200 Mbit/s at most
    cli("heal", lab.name, "link", *LINK)
    assert not effects(lab)
    # Restored: the shaper is gone from the port. Not `goodput > 0.5 Gbit/s`: unshaped, that
    # is how fast the CPU moves packets today, not what the link allows.
    assert not _capped(lab)
    assert transfer(lab)["integrity_ok"]


@pytest.mark.parametrize("args, field", [
    (["--loss", "150%"], "loss"), (["--corrupt", "x"], "corrupt"), (["--rate", "fast"], "rate"),
    (["--loss", "1%", "--silent"], "silent")])
def test_bad_gray_arguments_get_one_line_naming_the_field_and_change_nothing(lab, args, field):
    res = cli("fail", lab.name, "link", *LINK, *args, check=False)
    assert res.returncode != 0 and res.stderr.strip().count("\n") == 0
    assert f"{field}:" in res.stderr or f"--{field}" in res.stderr
    assert not effects(lab)


def test_gray_faults_in_an_experiment(shaped, tmp_path):
    """experiments/gray-link.yaml: its expect block holds (loss retransmits, corruption shows
    as bad ICRC, the slow link doubles the handoff p50), and nothing stays failed.

    Issue 24 (11): it ran on an unshaped lab, whose clean window moved at the CPU's speed,
    and a loaded machine brought that near the slow window's 400 Mbit/s (slow p50 1.5x
    clean, 2 of 2). It now runs on a shaped lab: both windows at line rates the emulation
    fixes, the gray rate (50G of 400G) dilated like the links (12.5 of 100 Mbit/s). The lab
    is the shared clos-2x4-cc: the file's own timeline heals the link after its last window."""
    out = tmp_path / "gray"
    cli("run", "experiments/gray-link.yaml", "--name", shaped.name, "--out", str(out), timeout=300)
    res = json.loads((out / "results.json").read_text())
    flows = {f["name"]: f for f in res["flows"]}
    assert res["link_rate_bps"] == 100e6 and res["dilation"] == 4000  # a shaped lab
    assert flows["corrupt"]["bad_icrc"] > 0 and flows["clean"]["bad_icrc"] == 0
    assert flows["loss"]["retransmitted_packets"] > 0
    assert flows["slow"]["goodput_bps"] <= 50e9 / 4000  # the gray rate, shaped at rate / D
    assert flows["slow"]["handoff_p50_s"] > 2 * flows["clean"]["handoff_p50_s"]


def _port_class_bps(lab_name: str, node: str, port: str) -> int | None:
    """Class 1:1's rate on a shaped lab's port, in bit/s, read over netlink."""
    plan = state.lab_plan(lab_name)
    with netns.entered(plan.node(node).netns), IPRoute() as ipr:
        return qos.port_rate(ipr, ipr.link_lookup(ifname=port)[0])


def test_a_shaped_labs_gray_rate_is_dilated_seen_by_status_and_healed(shaped):
    """Issue 24 (11): `--rate` was refused on a shaped lab. 100G on a 400G link at D = 4000
    sets each end's port class 1:1 to 25 Mbit/s; status reads it back as the 100G fault,
    and heal sets the port back to its 100 Mbit/s."""
    out = cli("fail", shaped.name, "link", "leaf1", "spine1", "--rate", "100G").stdout
    assert "gray: rate 100000 Mbit/s" in out
    assert _port_class_bps(shaped.name, "leaf1", "spine1") == 25_000_000
    assert _port_class_bps(shaped.name, "spine1", "leaf1") == 25_000_000
    (f,) = json.loads(cli("status", shaped.name, "--json", check=False).stdout)["faults"]
    assert f["rate_bps"] == 100 * 10**9
    cli("heal", shaped.name, "link", "leaf1", "spine1")
    assert _port_class_bps(shaped.name, "leaf1", "spine1") == 100_000_000
    assert not effects(shaped)
