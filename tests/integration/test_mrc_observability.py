"""MRC observability on a real lab (clos-2x4, $ROCELAB_TEST_PREFIX-mrcobs): a capture of an
MRC transfer read with the shipped Lua dissector, and the engine collector, `top`'s rows
and live diagnose's connections read from the engines mid-transfer."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from emulator import faults
from emulator.diagnose import mrcconns
from emulator.metrics import top
from emulator.metrics.collectors.engine import Collector
from emulator.metrics.scrape import Scraper
from emulator.metrics.snapshot import KEEP, labels_key, topology
from emulator.tools.capture import MRC_DISSECTOR

from .conftest import PREFIX, ROCELAB, cli, make_lab, poll, wait_for_line

EVS = 16


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """clos-2x4 with a BGP hold time (90 s) far beyond any test here: a silent link failure
    stays unrouted-around while a transfer runs, so what MRC retires does not depend on
    how fast this machine moves the bytes before BGP would notice."""
    topo = yaml.safe_load(Path("topologies/clos-2x4.yaml").read_text())
    topo |= {"name": "clos-2x4-longhold", "bgp": {"keepalive": 30, "hold": 90}}
    path = tmp_path_factory.mktemp("topo") / "clos-2x4-longhold.yaml"
    path.write_text(yaml.safe_dump(topo))
    yield from make_lab(str(path), f"{PREFIX}mrcobs")


def mrc_transfer(lab, src: str, dst: str, size: str, *extra: str) -> list[str]:
    return [ROCELAB, "transfer", lab.name, "--src", src, "--dst", dst, "--size", size,
            "--transport", "mrc", "--evs", str(EVS), "--json", *extra]


def tshark(pcap: Path, *fields: str) -> list[dict[str, str]]:
    done = subprocess.run(["tshark", "-r", str(pcap), "-X", f"lua_script:{MRC_DISSECTOR}",
                           "-T", "fields", "-E", "occurrence=f",
                           *[a for f in fields for a in ("-e", f)]],
                          capture_output=True, text=True, timeout=120, check=True)
    return [dict(zip(fields, line.split("\t"))) for line in done.stdout.splitlines()]


def test_a_capture_of_an_mrc_transfer_dissects_with_the_shipped_lua(lab, tmp_path):
    pcap = tmp_path / "mrc.pcap"
    leaf = lab.plan.node("prefill1").leaf
    cap = subprocess.Popen([ROCELAB, "capture", lab.name, leaf, "prefill1", "--filter",
                            "udp port 4791", "--count", "200", "--duration", "120", "-w", str(pcap)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_line(cap, "capturing", 20)
        # paced: uncapped, the compiled sender put a whole window (over 200 packets) on the
        # wire before the first SACK came back, and the 200 captured were all data
        res = json.loads(subprocess.run(mrc_transfer(lab, "prefill1", "decode1", "4MiB",
                                                     "--rate", "100M"),
                                        capture_output=True, text=True, timeout=300,
                                        check=True).stdout)
        _, err = cap.communicate(timeout=120)
    finally:
        if cap.poll() is None:
            cap.kill()
            cap.wait()
    assert cap.returncode == 0 and "200 packets" in err, err
    rows = tshark(pcap, "_ws.col.Protocol", "mrc.bth.opcode", "mrc.version", "mrc.ev",
                  "udp.srcport", "mrc.reth.len", "mrc.flags.trimmed", "_ws.malformed",
                  "_ws.expert.severity")
    assert len(rows) == 200 and {r["_ws.col.Protocol"] for r in rows} == {"MRC"}
    assert {"0xe0", "0xe2"} <= {r["mrc.bth.opcode"] for r in rows}  # data out, SACKs back
    assert {r["mrc.version"] for r in rows} == {"1"}
    data = [r for r in rows if r["mrc.bth.opcode"] in ("0xe0", "0xe1")]
    assert all(r["mrc.ev"] == r["udp.srcport"] and int(r["mrc.reth.len"]) > 0 for r in data)
    assert {int(r["mrc.ev"]) for r in data} <= {p["ev"] for p in res["mrc"]["paths"]}
    assert not any(r["_ws.malformed"] or r["_ws.expert.severity"] for r in rows)
    assert {r["mrc.flags.trimmed"] for r in data} == {"0"}  # an unshaped lab trims nothing


def test_collector_top_and_live_diagnose_read_the_engines_mid_transfer(lab):
    proc = subprocess.Popen(mrc_transfer(lab, "prefill2", "decode2", "256MiB"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    collector, scraper = Collector(lab.plan), Scraper(lab.plan)
    try:
        def live():
            raw = collector.fetch()
            sending = [c for c in raw.get("prefill2", {}).get("mrc", []) if c.get("paths")]
            return (raw, scraper.scrape()) if sending else None

        raw, scrape = poll(live, timeout=120, interval=0.1, what="a live MRC connection")
        out, err = proc.communicate(timeout=300)
    finally:
        collector.close()
        scraper.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    result = json.loads(out)
    fams = {f.name: f for f in Collector.parse(raw, lab.plan)}
    sent = {lb["ev"]: v for lb, v in fams["rocelab_mrc_path_bytes_total"].samples
            if lb["node"] == "prefill2"}
    assert len(sent) == EVS and sum(sent.values()) > 0
    rows = [r for r in top.view(lab.plan, None, scrape).mrc if r.flow == "prefill2->decode2"]
    assert [(r.node, r.evs, r.paths) for r in rows if r.conn != "finished"] == \
        [("prefill2", EVS, EVS)]
    metrics = {f.name: {labels_key({k: v for k, v in lb.items() if k != "lab"}): v
                        for lb, v in f.samples} for f in fams.values() if f.name in KEEP}
    [conn] = [c for c in mrcconns.from_metrics(metrics) if c["flow"] == "prefill2->decode2"]
    mrcconns.resolve_spines(lab.plan, [conn])
    spines = {p["ev"]: p["spine"] for p in conn["paths"]}
    assert spines == {p["ev"]: p["spine"] for p in result["mrc"]["paths"]}  # as the result says
    assert set(spines.values()) <= {"spine1", "spine2"}
    # the transfer is over: its connection is a finished sum now, history, not a finding
    done = cli("diagnose", lab.name, "--window", "1s", "--json", check=False)
    assert done.returncode in (0, 13), done.stderr
    assert "path-imbalance" not in {f["kind"] for f in json.loads(done.stdout)["findings"]}


def test_diagnose_names_the_silently_failed_link_from_the_transfer_result(lab, tmp_path):
    """leaf1-spine1 drops everything (carrier and BGP up) mid-transfer: MRC retires the EVs
    hashed onto spine1; path-imbalance, fed the transfer's own `mrc` block as a run's flow,
    names spine1 and the link, and `diagnose --results` exits 13. (BGP holds 90 s here:
    the EVs stay dead and hashed onto spine1 until the heal.)"""
    # capped: uncapped, the compiled MRC path moved 512 MiB in ~2.5 s, less than one
    # Collector.fetch of every host on a loaded machine, and the poll below never saw
    # it live; at 400 Mbit/s it runs ~11 s whatever the machine
    proc = subprocess.Popen(mrc_transfer(lab, "prefill1", "decode1", "512MiB", "--rate", "400M"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    collector = Collector(lab.plan)
    try:
        def under_way():
            mrc = collector.fetch().get("prefill1", {}).get("mrc", [])
            return sum(p["bytes"] for c in mrc if c["conn"] != "finished"
                       for p in c.get("paths") or []) >= 16 << 20

        poll(under_way, timeout=120, interval=0.05, what="16 MiB of the transfer sent")
        faults.fail(lab.plan, faults.link_fault(lab.plan, "leaf1", "spine1", True))  # no wait
        assert proc.poll() is None, "the transfer ended before the fault landed"
        out, err = proc.communicate(timeout=280)
    finally:
        collector.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        cli("heal", lab.name, "link", "leaf1", "spine1", check=False, timeout=120)
    assert proc.returncode == 0, err
    block = json.loads(out)["mrc"]
    assert block["retirements"] >= 1, block
    kinds, peers = topology(lab.plan)
    results = {"lab": lab.name, "flows": [{"name": "m", "src": "prefill1", "dst": "decode1",
                                           "op": "write", "mrc": block}],
               "evidence": {"kinds": kinds, "peers": peers, "metrics": {}, "window_s": 1}}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    res = cli("diagnose", "--results", str(path), "--json", check=False)
    assert res.returncode == 13, res.stderr
    [f] = [f for f in json.loads(res.stdout)["findings"] if f["kind"] == "path-imbalance"]
    assert f["where"][:2] == ["spine1", f"{lab.plan.node('prefill1').leaf}-spine1"], f
    assert "EVs retired" in f["cause"] and "through spine1" in f["cause"], f["cause"]

