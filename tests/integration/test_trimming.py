"""Packet trimming in the BPF dataplane (issue 27): an incast of MRC-format data packets
(contract-1 frames built here: BTH opcode 0xE0, MRC header, RETH, DSCP 18) from two hosts
into one, on a shaped lab with trimming on the MRC class (tests/fixtures/trim-incast.yaml).

Every packet arrives, whole or trimmed; a trimmed one is 128 B, DSCP 11, its MRC header
TRIMMED (and LASTHOP when the leaf port facing the receiver trimmed it, not when the
congested port was a leaf uplink), and the port's trim counters match what arrived. With
trimming off the same incast queues whole; the lossless RoCE class gets PFC pauses, never
trims."""

from __future__ import annotations

import json
import select
import socket
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyroute2 import IPRoute

from emulator import netns
from emulator.congestion import qos
from emulator.congestion.maps import StatsReader, set_trimming

from .conftest import PREFIX, ROCELAB, cli, make_lab, poll

TOPOLOGY = Path(__file__).parents[1] / "fixtures" / "trim-incast.yaml"
PAYLOAD = 1024  # UDP payload: a 1066-byte frame
PACKETS = 300  # per sender: 320 KB each at 10 Mbit/s (0.26 s), into a port that drains one sender's worth
THRESHOLD = 64_000  # the fixture's trimming.threshold
TRIMMED, LASTHOP = 0x1, 0x2
ETH_P_IP = 0x0800
PACKET_OUTGOING = 4
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33  # Linux; Python's socket module lacks them


@pytest.fixture(scope="module")
def lab():
    yield from make_lab(str(TOPOLOGY), f"{PREFIX}trim")


@dataclass
class Arrival:
    sport: int
    psn: int
    length: int  # frame bytes
    dscp: int
    ip_len: int
    udp_len: int
    opcode: int
    mrch_flags: int
    udp_csum: int
    ip_csum_ok: bool


def ip_csum_ok(header: bytes) -> bool:
    """An IPv4 header's ones'-complement sum, its checksum included, is 0xffff."""
    total = sum(struct.unpack("!10H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total == 0xFFFF


def mrc_payload(psn: int, ev: int) -> bytes:
    """BTH (opcode 0xE0 MRC_WRITE) + MRCH (v1, flags 0, plane 0, EV) + RETH + data."""
    bth = struct.pack("!BBHI I", 0xE0, 0, 0xFFFF, 0x000011, psn & 0xFFFFFF)
    mrch = struct.pack("!BBHIII", 0x10, 0, ev, 1, 0, 0)
    reth = struct.pack("!QII", 0x1000 + psn * 1024, 0x42, PAYLOAD)
    head = bth + mrch + reth
    return head + bytes(PAYLOAD - len(head))


def udp_socket(lab_, host: str, sport: int, dscp: int) -> socket.socket:
    with netns.entered(lab_.plan.node(host).netns):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 8 << 20)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
    s.bind(("", sport))
    return s


def capture(lab_, host: str) -> socket.socket:
    with netns.entered(lab_.plan.node(host).netns):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
    s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 32 << 20)
    s.bind(("eth0", ETH_P_IP))
    s.setblocking(False)
    return s


def parse(frame: bytes) -> Arrival | None:
    if len(frame) < 55 or frame[23] != socket.IPPROTO_UDP:
        return None
    sport, dport, udp_len = struct.unpack_from("!HHH", frame, 34)
    if dport not in (4791, 9) or not 50000 <= sport < 50100:
        return None
    psn = struct.unpack_from("!I", frame, 50)[0] & 0xFFFFFF  # BTH bytes 8-11
    return Arrival(sport, psn, len(frame), frame[15] >> 2, struct.unpack_from("!H", frame, 16)[0],
                   udp_len, frame[42], frame[54] & 0xF, struct.unpack_from("!H", frame, 40)[0],
                   ip_csum_ok(frame[14:34]))


def incast(lab_, senders: list[str], dst: str, dscp: int, dport: int = 4791,
           packets: int = PACKETS) -> list[Arrival]:
    """Each sender sends `packets` frames to dst, interleaved; every frame that arrives."""
    addr = lab_.plan.node(dst).address
    cap = capture(lab_, dst)
    socks = [udp_socket(lab_, h, 50000 + i, dscp) for i, h in enumerate(senders)]
    got: list[Arrival] = []
    try:
        for psn in range(packets):
            for i, s in enumerate(socks):
                s.sendto(mrc_payload(psn, 50000 + i), (addr, dport))
        want = packets * len(senders)
        poll(lambda: _drain(cap, got) >= want, timeout=120, what=f"{want} frames at {dst}")
    finally:
        for s in (*socks, cap):
            s.close()
    return got


def _drain(cap: socket.socket, got: list[Arrival]) -> int:
    while select.select([cap], [], [], 0)[0]:
        frame, meta = cap.recvfrom(65535)
        if meta[2] != PACKET_OUTGOING and (a := parse(frame)) is not None:
            got.append(a)
    return len(got)


def counters(lab_) -> dict[tuple[str, str, int], dict[str, int]]:
    reader = StatsReader(lab_.plan)
    try:
        return {(p.node, p.port, p.tc): p.values for p in reader.read((0, 2, 3, 6))}
    finally:
        reader.close()


def trims(before, after, field: str = "trim") -> dict[tuple[str, str, int], int]:
    """(node, port, TC) whose `field` grew, and by how much."""
    return {k: v[field] - before[k][field] for k, v in after.items() if v[field] != before[k][field]}


def settled(lab_, before, where) -> dict:
    """The counters once every trimmed packet counted at `where` is counted as sent too."""
    def done():
        now = counters(lab_)
        t = trims(before, now)
        return now if t and trims(before, now, "tx_trim") == t else None
    return poll(done, timeout=30, what=f"tx_trim to catch up with trim at {where}")


def class_sent(lab_, node: str, port: str, tc: int) -> tuple[int, int]:
    """(bytes, packets) the port's HTB class of `tc` sent, as the qdisc charged them."""
    with netns.entered(lab_.plan.node(node).netns), IPRoute() as ipr:
        idx = ipr.link_lookup(ifname=port)[0]
        for c in ipr.get_classes(index=idx):
            if c["handle"] == qos.classid(tc):
                basic = c.get_attr("TCA_STATS2").get_attr("TCA_STATS_BASIC")
                return basic["bytes"], basic["packets"]
    raise AssertionError(f"no HTB class for TC {tc} on {node}:{port}")


def check_trimmed(a: Arrival, lasthop: bool) -> None:
    assert (a.length, a.dscp, a.ip_len, a.udp_len, a.opcode) == (128, 11, 114, 94, 0xE0), a
    assert a.ip_csum_ok and a.udp_csum == 0, a
    assert a.mrch_flags == (TRIMMED | LASTHOP if lasthop else TRIMMED), a


def test_last_hop_incast_arrives_trimmed_and_counted(lab):
    before, sent_before = counters(lab), class_sent(lab, "leaf1", "rx1", 6)
    got = incast(lab, ["rx2", "rx3"], "rx1", dscp=18)
    after = settled(lab, before, "leaf1:rx1")
    assert sorted((a.sport, a.psn) for a in got) == sorted(
        (50000 + i, n) for i in range(2) for n in range(PACKETS))  # nothing lost
    trimmed = [a for a in got if a.length < 1066]
    whole = [a for a in got if a.length == 1066]
    assert trimmed and whole and len(trimmed) + len(whole) == len(got)
    print(f"last hop: {len(trimmed)} of {len(got)} trimmed, max queued "
          f"{after[('leaf1', 'rx1', 2)]['max_queued']} B")
    for a in trimmed:
        check_trimmed(a, lasthop=True)
    assert {(a.dscp, a.mrch_flags, a.ip_csum_ok) for a in whole} == {(18, 0, True)}
    assert trims(before, after) == {("leaf1", "rx1", 2): len(trimmed)}
    assert trims(before, after, "tx_trim") == {("leaf1", "rx1", 2): len(trimmed)}
    assert not trims(before, after, "dropped_trim")
    # the priority class was charged the trimmed length, not the length before the trim
    # (its size table: qos.size_from_skb), beside the odd control frame it also carries
    sent = [a - b for a, b in zip(class_sent(lab, "leaf1", "rx1", 6), sent_before)]
    print(f"priority class: {sent[0]} B in {sent[1]} packets")
    assert sent[1] >= len(trimmed) and sent[0] < 200 * sent[1], sent
    # the MRC queue never grew past the threshold (plus the frames two CPUs race in)
    assert after[("leaf1", "rx1", 2)]["max_queued"] <= THRESHOLD + 4 * 1066
    poll(lambda: [counters(lab)[("leaf1", "rx1", tc)]["queued"] for tc in (2, 6)] == [0, 0],
         what="leaf1:rx1's TC 2 and TC 6 queues back to 0 bytes (balanced accounting)")


def test_fabric_incast_is_trimmed_at_the_uplink_without_lasthop(lab):
    before = counters(lab)
    got = incast(lab, ["tx1", "tx2"], "rx1", dscp=18)
    after = settled(lab, before, "leaf2:spine1")
    assert len(got) == 2 * PACKETS
    trimmed = [a for a in got if a.length < 1066]
    assert trimmed
    print(f"fabric: {len(trimmed)} of {len(got)} trimmed")
    for a in trimmed:
        check_trimmed(a, lasthop=False)
    assert trims(before, after) == {("leaf2", "spine1", 2): len(trimmed)}
    assert trims(before, after, "tx_trim") == {("leaf2", "spine1", 2): len(trimmed)}


def test_lossless_class_gets_pauses_not_trims(lab):
    before = counters(lab)
    got = incast(lab, ["rx2", "rx3"], "rx1", dscp=26, dport=9, packets=300)
    after = counters(lab)
    assert len(got) == 600 and {(a.length, a.dscp) for a in got} == {(1066, 26)}
    assert not trims(before, after) and not trims(before, after, "dropped_trim")
    paused = trims(before, after, "pause_tx")  # XOFF/XON out of leaf1's ports toward rx2/rx3
    print(f"lossless: pause frames {paused}")
    assert paused and {k[:2] for k in paused} <= {("leaf1", "rx2"), ("leaf1", "rx3")}, paused


def test_live_diagnose_names_the_last_hop_hotspot_and_exits_13(lab):
    proc = subprocess.Popen([ROCELAB, "diagnose", lab.name, "--window", "3s", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while proc.poll() is None:  # keep the incast going for the whole window
            incast(lab, ["rx2", "rx3"], "rx1", dscp=18)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 13, err
    (f,) = [f for f in json.loads(out)["findings"] if f["kind"] == "trimming-hotspot"]
    assert f["where"] == ["leaf1:rx1"] and f["severity"] == "warning", f
    assert "at the last hop, into rx1" in f["cause"] and "fabric" not in f["cause"], f
    assert [(e["node"], e["port"], e["where"]) for e in f["evidence"]] == [
        ("leaf1", "rx1", "last hop")]


def test_with_trimming_off_the_same_incast_queues_whole(lab):
    leaf1 = lab.plan.node("leaf1")
    set_trimming(lab.plan, leaf1, False)
    try:
        before = counters(lab)
        got = incast(lab, ["rx2", "rx3"], "rx1", dscp=18)
        after = counters(lab)
    finally:
        set_trimming(lab.plan, leaf1, True)
    assert len(got) == 2 * PACKETS and {(a.length, a.dscp, a.mrch_flags) for a in got} == {
        (1066, 18, 0)}
    assert not trims(before, after)
    print(f"trimming off: max queued {after[('leaf1', 'rx1', 2)]['max_queued']} B")
    assert after[("leaf1", "rx1", 2)]["max_queued"] > 2 * THRESHOLD  # it queued instead



def test_top_shows_the_trims_column_on_a_trimming_lab(lab):
    out = cli("top", lab.name, "--once", "--interval", "0.5").stdout
    assert "hottest ports" in out and "trims" in out, out
