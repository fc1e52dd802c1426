"""The pure parts of `list`, `vtysh` and `capture`: lookups, argv, the pcap counter, health words."""

from __future__ import annotations

import io
import os
import random
import struct
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import PcapWriter

from emulator.cli import list_, main
from emulator.errors import ExitCode
from emulator.lab import load_topology
from emulator.paths import ENV_TAG, RUN_ROOT
from emulator.tools import capture, labs, lookup, vtysh


@pytest.fixture(scope="module")
def plan():
    return load_topology("topologies/clos-2x4.yaml", name="h2-unit")[1]


def test_the_three_commands_are_registered():
    assert {"list", "vtysh", "capture"} <= set(main.commands)


# -- lookups -----------------------------------------------------------------

def test_a_router_is_found(plan):
    assert lookup.router(plan, "leaf1").name == "leaf1"


@pytest.mark.parametrize("name, says", [
    ("prefill1", "prefill1 is a host in lab h2-unit, not a router"),
    ("leaf9", "lab h2-unit has no router 'leaf9'"),
])
def test_a_host_or_unknown_node_is_not_a_router_and_the_routers_are_named(plan, name, says):
    with pytest.raises(lookup.NodeNotFoundError) as e:
        lookup.router(plan, name)
    msg = str(e.value)
    assert e.value.exit_code == ExitCode.NOT_FOUND
    assert msg.startswith(says) and "\n" not in msg
    assert msg.endswith("routers: spine1, spine2, leaf1, leaf2, leaf3, leaf4")


def test_ports_are_found_and_an_unknown_port_names_the_ports(plan):
    node, port = lookup.port(plan, "leaf1", "spine1")
    assert (node.name, port.name, port.peer) == ("leaf1", "spine1", "spine1")
    assert lookup.port(plan, "prefill1", "eth0")[1].peer == "leaf1"
    with pytest.raises(lookup.NodeNotFoundError, match=r"leaf1 in lab h2-unit has no port 'spine9'; "
                       r"ports: spine1, spine2, prefill1, prefill2$") as e:
        lookup.port(plan, "leaf1", "spine9")
    assert e.value.exit_code == ExitCode.NOT_FOUND
    with pytest.raises(lookup.NodeNotFoundError, match=r"has no node 'nope'; nodes: spine1, .*decode4"):
        lookup.port(plan, "nope", "eth0")


# -- vtysh -------------------------------------------------------------------

def test_vtysh_is_bound_to_the_routers_own_run_dir():
    """Its sockets and its config directory (`write memory` never reaches /etc/frr)."""
    leaf1, spine2 = str(RUN_ROOT / "h2-unit" / "leaf1"), str(RUN_ROOT / "h2-unit" / "spine2")
    assert vtysh.argv("h2-unit", "leaf1", ["show bgp summary json", "show ip route"]) == [
        "vtysh", "--vty_socket", leaf1, "--config_dir", leaf1,
        "-c", "show bgp summary json", "-c", "show ip route"]
    assert vtysh.argv("h2-unit", "spine2") == ["vtysh", "--vty_socket", spine2,
                                               "--config_dir", spine2]


def test_the_interactive_shell_is_tagged_and_keeps_only_the_terminal():
    env = vtysh.interactive_env("h2-unit", {"TERM": "xterm", "HOME": "/root", "SECRET": "x",
                                            "PATH": "/home/me/bin", "LD_PRELOAD": "evil.so"})
    assert env[ENV_TAG] == "h2-unit" and env["TERM"] == "xterm" and env["HOME"] == "/root"
    assert "SECRET" not in env and "LD_PRELOAD" not in env
    assert env["PATH"] == "/usr/sbin:/usr/bin:/sbin:/bin"


def test_vtysh_refuses_no_commands_and_hosts_before_running_anything(plan):
    with pytest.raises(lookup.NodeNotFoundError):
        vtysh.run(plan, "decode1", ["show version"])
    with pytest.raises(vtysh.RocelabError, match="at least one command"):
        vtysh.run(plan, "leaf1", [])


def test_the_last_line_of_what_vtysh_said():
    assert vtysh.last_line("a\n% Unknown command: show foo\n\n") == "% Unknown command: show foo"
    assert vtysh.last_line("") == ""


# -- capture -----------------------------------------------------------------

def test_tcpdump_takes_whole_frames_to_stdout_packet_by_packet():
    argv = capture.tcpdump_argv("spine1", 5, "udp port 4791")
    assert argv[:3] == ["tcpdump", "-i", "spine1"]
    for flag in (["-s", "0"], ["-w", "-"], ["-c", "5"]):
        i = argv.index(flag[0])
        assert argv[i:i + 2] == flag
    assert "-U" in argv and "--immediate-mode" in argv
    assert argv[-2:] == ["--", "udp port 4791"]  # one argument, never a shell string


@pytest.mark.parametrize("bpf", ["-w /etc/passwd", "--version", "-z /bin/sh"])
def test_a_filter_that_looks_like_an_option_stays_the_expression(bpf):
    argv = capture.tcpdump_argv("eth0", 0, bpf)
    assert argv[-2:] == ["--", bpf] and argv.index("--") == len(argv) - 2


def test_no_count_and_no_filter_add_no_arguments():
    argv = capture.tcpdump_argv("eth0", 0, None)
    assert "-c" not in argv and argv[-1] == "-"
    assert capture.tcpdump_argv("eth0", 0, "  ")[-1] == "-"


def test_the_default_file_is_named_after_lab_node_and_port():
    assert capture.default_path("clos-2x4", "leaf1", "spine1") == "clos-2x4-leaf1-spine1.pcap"


def _pcap(n: int, nano: bool = False) -> bytes:
    buf = io.BytesIO()
    w = PcapWriter(buf, nano=nano, sync=True)
    for i in range(n):
        w.write(Ether() / IP(dst="10.0.0.1") / UDP(dport=4791) / (b"x" * (i * 37 % 300)))
    w.flush()
    return buf.getvalue()


@pytest.mark.parametrize("nano", [False, True])
def test_the_counter_counts_records_however_the_stream_is_cut(nano):
    data = _pcap(25, nano)
    rng = random.Random(7)
    for _ in range(20):
        c = capture.PcapCounter()
        pos = 0
        while pos < len(data):
            step = rng.choice([1, 2, 3, 15, 16, 17, 24, 100, 4096])
            c.feed(data[pos:pos + step])
            pos += step
        assert (c.packets, c.bytes, c.partial) == (25, len(data), False)
    whole = capture.PcapCounter()
    assert whole.feed(data) == 25


def test_the_counter_reads_big_endian_and_sees_a_cut_record():
    body = b"\x00" * 60
    header = struct.pack(">IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    record = struct.pack(">IIII", 1, 0, len(body), len(body)) + body
    c = capture.PcapCounter()
    assert c.feed(header + record + record[:30]) == 1
    assert c.partial
    assert c.feed(record[30:]) == 1 and not c.partial and c.packets == 2


def test_a_stream_that_is_not_pcap_is_refused():
    with pytest.raises(ValueError, match="not a pcap stream"):
        capture.PcapCounter().feed(b"\x0a\x0d\x0d\x0a" + b"\x00" * 40)  # pcapng


def test_tcpdumps_closing_statistics():
    said = ("tcpdump: listening on spine1, link-type EN10MB (Ethernet), snapshot length 262144 bytes\n"
            "5 packets captured\n6 packets received by filter\n1 packet dropped by kernel\n")
    assert capture.parse_stats(said) == {"captured": 5, "received by filter": 6,
                                         "dropped by kernel": 1}
    assert capture.parse_stats("") == {}


def test_negative_limits_are_refused_before_anything_runs(plan):
    with pytest.raises(capture.RocelabError, match="--count and --duration"):
        capture.capture(plan, "leaf1", "spine1", lambda: io.BytesIO(), count=-1)


# -- list --------------------------------------------------------------------

@pytest.mark.parametrize("seconds, text", [
    (None, "?"), (-3, "0s"), (0, "0s"), (59.9, "59s"), (60, "1m00s"), (307, "5m07s"),
    (3600, "1h00m"), (11_040, "3h04m"), (86_400, "1d00h"), (190_800, "2d05h"),
])
def test_ages_read_at_a_glance(seconds, text):
    assert labs.format_age(seconds) == text


def _health(**kw):
    base = dict(has_state=True, status="up", missing_namespaces=[], dead_daemons=[], fib=[],
                faults_in_force=0)
    return labs.health_of("h2-x", **(base | kw))


def test_health_words_in_order_of_precedence():
    assert _health() == ("healthy", None)
    assert _health(faults_in_force=1)[0] == "converged"
    word, why = _health(fib=["leaf1: 3 host prefixes ...", "leaf2: ..."], faults_in_force=1)
    assert word == "not-converged" and why.endswith("(+1 more routers)")
    assert _health(dead_daemons=["bgpd on spine1 (pid 9)"], fib=["x"])[0] == "broken"
    assert _health(missing_namespaces=["h2-x-leaf1"])[1] == "1 namespaces missing (e.g. h2-x-leaf1)"
    assert _health(status="creating", missing_namespaces=["a"])[0] == "starting"
    word, why = _health(has_state=False, status=None)
    assert word == "broken" and "`rocelab down h2-x`" in why


def test_fib_problems_name_the_router_and_an_example():
    expected = {"leaf1": {"10.2.3.0/31": 2, "10.2.3.2/31": 2}, "spine1": {"10.2.3.0/31": 1}}
    assert labs.fib_problems({"leaf1": {"10.2.3.0/31": 2, "10.2.3.2/31": 2},
                              "spine1": {"10.2.3.0/31": 1}}, expected) == []
    problems = labs.fib_problems({"leaf1": {"10.2.3.0/31": 1}}, expected)
    assert problems[0] == ("leaf1: 2 host prefixes not at the expected ECMP width "
                           "(e.g. 10.2.3.0/31: 1, want 2)")
    assert problems[1].startswith("spine1: 1 host prefixes")


def test_a_labs_creation_time(tmp_path):
    assert labs.created_at({"created": 1234.5}, tmp_path) == 1234.5
    assert labs.created_at(None, tmp_path / "gone") is None
    (tmp_path / "leaf1").mkdir()
    (tmp_path / "leaf1" / "zebra.conf").write_text("")
    (tmp_path / "state.json").write_text("{}")
    os.utime(tmp_path / "leaf1" / "zebra.conf", (1000, 1000))  # written once at `up`
    os.utime(tmp_path / "state.json", (5000, 5000))  # rewritten since
    assert labs.created_at({"status": "up"}, tmp_path) == 1000


def _row(**kw) -> labs.LabRow:
    row: labs.LabRow = {"name": "h2-a", "topology": None, "routers": None, "hosts": None,
                        "namespaces": 0, "processes": 0, "faults": 0, "created": None, "age_s": None,
                        "health": "broken", "detail": None}
    return row | kw  # type: ignore[return-value]


def test_the_list_table_aligns_and_says_why_a_lab_is_not_converged():
    lines = list_.table([
        _row(name="h2-a", topology=str(Path.cwd() / "topologies/clos-2x4.yaml"), routers=6, hosts=8,
             age_s=307, health="healthy"),
        _row(name="h2-longer", topology="/elsewhere/t.yaml", routers=3, hosts=2, age_s=5,
             health="not-converged", detail="leaf1: 2 host prefixes ..."),
        _row(name="h2-c", detail="no state file (crashed?)"),
    ])
    assert lines[0].split() == ["LAB", "TOPOLOGY", "ROUTERS", "HOSTS", "AGE", "HEALTH"]
    assert lines[1].split() == ["h2-a", "topologies/clos-2x4.yaml", "6", "8", "5m07s", "healthy"]
    assert lines[2].endswith("not-converged (leaf1: 2 host prefixes ...)")
    assert "/elsewhere/t.yaml" in lines[2]
    assert lines[3].split()[:6] == ["h2-c", "-", "-", "-", "?", "broken"]
    for col in ("TOPOLOGY", "AGE", "HEALTH"):  # every row starts each column at the same place
        at = lines[0].index(col)
        assert all(line[at - 2:at] == "  " and line[at] != " " for line in lines), col


def test_list_json_keys_are_the_documented_ones():
    assert set(labs.LabRow.__annotations__) == {
        "name", "topology", "routers", "hosts", "namespaces", "processes", "faults", "created",
        "age_s", "health", "detail"}


def test_bridged_labs_are_judged_by_stp_port_states():
    expected = {"spine2": {"leaf2": "blocking", "leaf1": "forwarding"}}
    assert labs.fib_problems({"spine2": {"leaf2": "blocking", "leaf1": "forwarding"}}, expected,
                             bridged=True) == []
    problems = labs.fib_problems({"spine2": {"leaf2": "disabled", "leaf1": "forwarding"}},
                                 expected, bridged=True)
    assert problems == ["spine2: 1 ports not in the planned STP state "
                        "(e.g. leaf2: disabled, want blocking)"]
    assert labs.fib_problems({}, expected, bridged=True)[0].startswith("spine2: 2 ports")
