"""`list`, `vtysh` and `capture` against a real lab (named $ROCELAB_TEST_PREFIX-tools, always removed)."""

from __future__ import annotations

import json
import subprocess
from io import BytesIO
from pathlib import Path

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import UDP
from scapy.utils import rdpcap

from emulator.errors import ExitCode

from .conftest import PREFIX, ROCELAB, cli, make_lab, wait_for_line

PCAP_MAGIC = b"\xd4\xc3\xb2\xa1"


@pytest.fixture(scope="module")
def lab():
    yield from make_lab("topologies/clos-2x4.yaml", f"{PREFIX}tools")


def _tshark(pcap: Path, *args: str) -> list[str]:
    """tshark's lines for the file (UDP 4791 decodes as RoCEv2, "RRoCE", by default)."""
    done = subprocess.run(["tshark", "-r", str(pcap), "--disable-protocol", "rpcordma", *args],
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.splitlines()


# -- list --------------------------------------------------------------------

def test_list_shows_the_lab_its_size_and_that_it_is_healthy(lab):
    rows = json.loads(cli("list", "--json").stdout)
    assert isinstance(rows, list)
    row = next(r for r in rows if r["name"] == lab.name)
    assert (row["routers"], row["hosts"]) == (6, 8)
    assert row["topology"].endswith("topologies/clos-2x4.yaml")
    assert row["health"] == "healthy" and row["detail"] is None and row["faults"] == 0
    assert row["namespaces"] == 14 and row["processes"] >= 12  # zebra + bgpd on 6 routers
    assert 0 <= row["age_s"] < 600
    text = cli("list").stdout.splitlines()
    assert text[0].split() == ["LAB", "TOPOLOGY", "ROUTERS", "HOSTS", "AGE", "HEALTH"]
    line = next(t for t in text if t.split()[0] == lab.name)
    assert line.split()[2:4] == ["6", "8"] and line.split()[5] == "healthy"


# -- vtysh -------------------------------------------------------------------

def test_vtysh_reaches_that_labs_router(lab):
    leaf1 = lab.plan.node("leaf1")
    data = json.loads(cli("vtysh", lab.name, "leaf1", "-c", "show bgp summary json").stdout)
    summary = data["ipv4Unicast"]
    assert summary["routerId"] == leaf1.loopback.split("/")[0]
    assert summary["as"] == leaf1.asn
    assert {p["state"] for p in summary["peers"].values()} == {"Established"}
    spine = json.loads(cli("vtysh", lab.name, "spine1", "-c", "show bgp summary json").stdout)
    assert spine["ipv4Unicast"]["as"] == lab.plan.node("spine1").asn != leaf1.asn


def test_vtysh_runs_several_commands_and_fails_on_a_bad_one(lab):
    out = cli("vtysh", lab.name, "leaf2", "-c", "show version", "-c", "show ip route summary").stdout
    assert "FRRouting" in out and "ebgp" in out
    res = cli("vtysh", lab.name, "leaf2", "-c", "show version", "-c", "show nonsense", check=False)
    assert res.returncode == ExitCode.ERROR
    assert "FRRouting" in res.stdout  # what ran before the failure is still printed
    assert res.stderr.strip().count("\n") == 0 and "show nonsense" in res.stderr


@pytest.mark.parametrize("node, says", [("prefill1", "is a host"), ("leaf9", "no router 'leaf9'")])
def test_vtysh_refuses_a_host_or_unknown_node_naming_the_routers(lab, node, says):
    res = cli("vtysh", lab.name, node, "-c", "show version", check=False)
    assert res.returncode == ExitCode.NOT_FOUND, res.stderr
    err = res.stderr.strip()
    assert "\n" not in err and says in err
    assert err.endswith("routers: spine1, spine2, leaf1, leaf2, leaf3, leaf4")
    assert res.stdout == ""


# -- capture -----------------------------------------------------------------

def test_capture_writes_exactly_count_packets(lab, tmp_path):
    pcap = tmp_path / "five.pcap"
    res = cli("capture", lab.name, "leaf1", "spine1", "--count", "5", "--duration", "60",
              "-w", str(pcap))
    assert "5 packets" in res.stderr and "stopped: count" in res.stderr and res.stdout == ""
    assert len(rdpcap(str(pcap))) == 5
    assert len(_tshark(pcap)) == 5


def test_capture_replaces_a_link_planted_at_its_file(lab, tmp_path):
    """Issue 24 (4): `-w FILE` where someone planted a symlink to a decoy: capture runs as
    root, so opening FILE through the link would have truncated the decoy."""
    decoy = tmp_path / "decoy"
    decoy.write_bytes(b"precious\n")
    pcap = tmp_path / "cap.pcap"
    pcap.symlink_to(decoy)
    cli("capture", lab.name, "leaf1", "spine1", "--count", "1", "--duration", "60", "-w", str(pcap))
    assert decoy.read_bytes() == b"precious\n"
    assert not pcap.is_symlink() and pcap.read_bytes()[:4] == PCAP_MAGIC


def test_capture_streams_pcap_to_stdout(lab):
    res = subprocess.run([ROCELAB, "capture", lab.name, "leaf1", "spine1", "--count", "3",
                          "--duration", "60", "-w", "-"], capture_output=True, timeout=90)
    assert res.returncode == 0, res.stderr
    assert res.stdout[:4] == PCAP_MAGIC
    assert len(rdpcap(BytesIO(res.stdout))) == 3
    assert b"3 packets" in res.stderr


def test_capture_default_file_is_named_after_lab_node_and_port(lab, tmp_path):
    res = subprocess.run([ROCELAB, "capture", lab.name, "spine2", "leaf4", "--count", "2",
                          "--duration", "60"], capture_output=True, text=True, cwd=tmp_path, timeout=90)
    assert res.returncode == 0, res.stderr
    assert len(rdpcap(str(tmp_path / f"{lab.name}-spine2-leaf4.pcap"))) == 2


def test_capture_stops_after_its_duration(lab, tmp_path):
    pcap = tmp_path / "quiet.pcap"
    res = cli("capture", lab.name, "leaf3", "decode1", "--filter", "udp port 4791", "--count", "0",
              "--duration", "1s", "-w", str(pcap), timeout=60)  # count 0: only the duration stops it
    assert "stopped: duration" in res.stderr
    assert len(rdpcap(str(pcap))) == 0  # no RoCE traffic: a valid, empty pcap


@pytest.mark.parametrize("node, port, says", [
    ("leaf1", "spine9", "ports: spine1, spine2, prefill1, prefill2"),
    ("leaf9", "spine1", "nodes: spine1, spine2, leaf1"),
])
def test_capture_refuses_an_unknown_node_or_port_naming_the_valid_ones(lab, tmp_path, node, port, says):
    res = subprocess.run([ROCELAB, "capture", lab.name, node, port], capture_output=True, text=True,
                         cwd=tmp_path, timeout=60)
    assert res.returncode == ExitCode.NOT_FOUND and says in res.stderr
    assert res.stderr.strip().count("\n") == 0
    assert list(tmp_path.iterdir()) == []  # no file for a capture that never started


def test_capture_of_a_rocev2_transfer_decodes_as_roce(lab, tmp_path):
    pcap = tmp_path / "roce.pcap"
    leaf = lab.plan.node("prefill1").leaf
    cap = subprocess.Popen([ROCELAB, "capture", lab.name, leaf, "prefill1", "--filter", "udp port 4791",
                            "--count", "40", "--duration", "60", "-w", str(pcap)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_line(cap, "capturing", 20)
        cli("transfer", lab.name, "--src", "prefill1", "--dst", "decode1", "--size", "1MiB")
        _, err = cap.communicate(timeout=60)
    finally:
        if cap.poll() is None:
            cap.kill()
            cap.wait()
    assert cap.returncode == 0, err
    assert "40 packets" in err and "stopped: count" in err
    packets = rdpcap(str(pcap))
    assert len(packets) == 40
    assert all(p.haslayer(UDP) and p[UDP].dport == 4791 and p.haslayer(BTH) for p in packets)
    fields = ["_ws.col.Protocol", "infiniband.bth.opcode", "_ws.malformed"]
    rows = [r.split("\t") for r in _tshark(pcap, "-T", "fields", *[a for f in fields for a in ("-e", f)])]
    assert len(rows) == 40 and all(r[0] == "RRoCE" for r in rows), rows[:3]
    opcodes = {int(r[1]) for r in rows}
    assert opcodes & {6, 7, 8, 10}, opcodes  # RDMA WRITE first/middle/last/only
    assert not any(r[2] for r in rows), "tshark reported malformed packets"
