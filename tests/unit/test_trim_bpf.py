"""fabric.bpf.c's trimming, run in the kernel on crafted frames (BPF_PROG_TEST_RUN, as
test_red_mark.py does for RED): what a trimmed frame looks like byte for byte, the MRC
header's flags by where the port faces, the counters, and every frame it must leave whole.
(tests/integration/test_trimming.py proves the same on a real lab's incast.)"""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
from pathlib import Path

import pytest

from emulator.congestion import libbpf
from emulator.congestion.maps import NTC, STAT, pack_cfg, peer_faces_host, unpack_stat
from emulator.lab import load_topology
from tests.bpf_run import SKB_CB, run_once

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("clang"),
                                reason="loads a BPF program: root and clang")

SOURCE = Path(libbpf.__file__).with_name("bpf") / "fabric.bpf.c"  # what the controller loads



PLAN = load_topology(str(Path(__file__).parents[1] / "fixtures" / "trim-incast.yaml"))[1]
CP = PLAN.congestion
THRESHOLD = CP.trim.threshold
PROBE = """\
#include "{source}"

SEC("tc")
int trim_probe(struct __sk_buff *skb) {{
    struct parsed p;
    if (parse(skb, &p) < 0)
        return -1;
    __u32 port = skb->cb[0];
    struct port_cfg *c = bpf_map_lookup_elem(&cfg, &port);
    if (!c)
        return -1;
    return trim(skb, c, &p, port);
}}
"""
NONE, DONE, DROP = 0, 1, 2
DOWN, UP = 1, 2  # probe port ids: leaf1's port facing rx1 (a host), and facing spine1


def frame(dscp: int = 18, opcode: int = 0xE0, dport: int = 4791, size: int = 1066,
          ihl: int = 5) -> bytes:
    """Ethernet + IPv4 (ECT(0)) + UDP + BTH + MRCH (v1) + RETH + a payload counting up."""
    opts = bytes(4 * (ihl - 5))
    ip_len = size - 14
    ip = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, dscp << 2 | 0b10, ip_len, 7, 0x4000, 64, 17,
                     0, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])) + opts
    ip = ip[:10] + struct.pack("!H", _csum(ip)) + ip[12:]
    bth = struct.pack("!BBHII", opcode, 0, 0xFFFF, 0x11, 5)
    mrch = struct.pack("!BBHIII", 0x10, 0, 50001, 9, 1234, 0)
    reth = struct.pack("!QII", 0x1000, 0x42, 1024)
    head = bytes(6) + bytes.fromhex("02524c000101") + b"\x08\x00" + ip
    udp = struct.pack("!HHHH", 50001, dport, ip_len - len(ip), 0xBEEF)
    body = bth + mrch + reth
    return (head + udp + body + bytes(i & 0xFF for i in range(size)))[:size]


def _csum(header: bytes) -> int:
    words = struct.unpack(f"!{len(header) // 2}H", header[:10] + b"\0\0" + header[12:])
    total = sum(words)
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


class Probe:
    def __init__(self, tmp_path):
        src = tmp_path / "trim.bpf.c"
        src.write_text(PROBE.format(source=SOURCE.resolve()))
        self.obj = libbpf.BpfObject(libbpf.compile_object(src, tmp_path / "trim.bpf.o"))
        self.fd = self.obj.prog_fd("trim_probe")
        leaf1 = PLAN.node("leaf1")
        for pid, name in ((DOWN, "rx1"), (UP, "spine1")):
            port = leaf1.interface(name)
            libbpf.update(self.obj.map_fd("cfg"), pid, pack_cfg(
                PLAN, leaf1, 99, peer_faces_host(PLAN, port)))
        for dscp, tc in CP.dscp_tc().items():
            libbpf.update(self.obj.map_fd("dscp_tc"), dscp, struct.pack("=I", tc))
        self.run = libbpf.lib().bpf_prog_test_run_opts
        self.run.restype, self.run.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.c_void_p]

    def queue(self, port: int, tc: int, depth: int) -> None:
        values = [0] * len(STAT.unpack(bytes(STAT.size)))
        values[0] = depth  # queued
        libbpf.update(self.obj.map_fd("stats"), port * NTC + tc, STAT.pack(*values))

    def stats(self, port: int, tc: int) -> dict[str, int]:
        return unpack_stat(libbpf.lookup(self.obj.map_fd("stats"), port * NTC + tc, STAT.size), 0)

    def trim(self, data: bytes, port: int) -> tuple[int, bytes]:
        ctx = bytearray(SKB_CB + 20)
        struct.pack_into("=5I", ctx, SKB_CB, port, 0, 0, 0, 0)
        retval, out = run_once(self.run, self.fd, data, bytes(ctx))
        return ctypes.c_int32(retval).value, out

    def close(self) -> None:
        self.obj.close()


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    p = Probe(tmp_path_factory.mktemp("trim"))
    yield p
    p.close()


@pytest.fixture
def probe(loaded):
    for port in (DOWN, UP):  # every test starts from empty queues and zero counters
        for tc in range(NTC):
            loaded.queue(port, tc, 0)
    return loaded


def test_a_trimmed_mrc_packet_at_the_last_hop(probe):
    probe.queue(DOWN, 2, THRESHOLD)
    data = frame()
    verdict, out = probe.trim(data, DOWN)
    assert verdict == DONE and len(out) == 128
    assert out[15] == (11 << 2 | 0b10)  # DSCP 11, ECT(0) kept
    assert struct.unpack_from("!H", out, 16)[0] == 114  # IPv4 total length
    assert struct.unpack_from("!H", out, 24)[0] == _csum(out[14:34])  # ... and header checksum
    assert struct.unpack_from("!HH", out, 38) == (94, 0)  # UDP length, checksum 0
    assert out[54] == 0x10 | 0x1 | 0x2  # version 1, TRIMMED | LASTHOP
    assert out[:15] == data[:15] and out[18:24] == data[18:24] and out[26:38] == data[26:38]
    assert out[42:54] == data[42:54] and out[55:] == data[55:128]  # BTH, rest of MRCH, RETH
    assert probe.stats(DOWN, 2)["trim"] == 1 and probe.stats(DOWN, 2)["dropped_trim"] == 0


def test_in_the_fabric_no_lasthop(probe):
    probe.queue(UP, 2, THRESHOLD)
    verdict, out = probe.trim(frame(opcode=0xE1), UP)
    assert verdict == DONE and out[54] == 0x11 and probe.stats(UP, 2)["trim"] == 1


def test_a_non_mrc_packet_of_the_class_is_trimmed_but_its_bytes_are_not_flagged(probe):
    probe.queue(DOWN, 2, THRESHOLD)
    data = frame(opcode=0x0A)  # RDMA WRITE only, not MRC: no MRC header to flag
    verdict, out = probe.trim(data, DOWN)
    assert verdict == DONE and len(out) == 128 and out[54] == data[54]


def test_the_priority_class_full_drops_and_counts(probe):
    probe.queue(DOWN, 2, THRESHOLD)
    probe.queue(DOWN, 6, CP.buffer_bytes - 100)
    assert probe.trim(frame(), DOWN)[0] == DROP
    s = probe.stats(DOWN, 2)
    assert (s["trim"], s["dropped_trim"]) == (1, 1)


@pytest.mark.parametrize(("why", "data", "depth"), [
    ("below the threshold", frame(), THRESHOLD - 1066),
    ("the lossless RoCE class keeps PFC", frame(dscp=26), 10 * THRESHOLD),
    ("unclassified (TC 0) is not trimmable here", frame(dscp=0), 10 * THRESHOLD),
    ("VXLAN is never trimmed", frame(dport=4789), 10 * THRESHOLD),
    ("IPv4 options: queued whole", frame(ihl=6), 10 * THRESHOLD),
    ("no longer than the trim size", frame(size=128), 10 * THRESHOLD),
])
def test_frames_left_whole(probe, why, data, depth):
    for tc in (0, 2, 3):
        probe.queue(DOWN, tc, depth)
    verdict, out = probe.trim(data, DOWN)
    assert (verdict, out) == (NONE, data), why
    assert all(probe.stats(DOWN, tc)["trim"] == 0 for tc in (0, 2, 3)), why
