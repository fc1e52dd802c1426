"""The ECN-off rule owes marks by RED's curve in Python (diagnose.rules.mark_probability);
the dataplane marks by its own (fabric.bpf.c's red_mark). This runs the BPF program's
red_mark itself, loaded in the kernel (BPF_PROG_TEST_RUN), on the same queue depths and
thresholds as the Python rule: each must mark exactly where the other does, so a
threshold or scale changed on one side alone fails here.

The probe compiles fabric.bpf.c unchanged with one entry point added; the random draw
red_mark compares with its probability comes from the test (skb->mark), so each run is
a decision, not a coin toss. Root, clang and libbpf are needed; else it skips.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from emulator.congestion import libbpf
from emulator.congestion.maps import pack_cfg
from emulator.diagnose.evidence import Evidence
from emulator.diagnose.rules import ROCE_TC, mark_probability
from emulator.lab import load_topology
from emulator.metrics.snapshot import thresholds
from tests.bpf_run import SKB_CB, SKB_MARK, run_once

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("clang"),
                                reason="loads a BPF program: root and clang")

SOURCE = Path(libbpf.__file__).with_name("bpf") / "fabric.bpf.c"  # what the controller loads
PLAN = load_topology("topologies/clos-2x4-cc.yaml")[1]
PORT = 1  # the probe's port id in its own, private cfg map
DRAW_MAX = 0xFFFFFFFF
PROBE = """\
// fabric.bpf.c's red_mark on a chosen depth: the draw is skb->mark, the depth cb[0]
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#define bpf_get_prandom_u32() (skb->mark)
#include "{source}"

SEC("tc")
int red_probe(struct __sk_buff *skb) {{
    struct parsed p;
    if (parse(skb, &p) < 0 || !p.ip)
        return -1;
    p.tc = skb->cb[1] & (NTC - 1);
    __u32 port = skb->cb[2];
    struct port_cfg *c = bpf_map_lookup_elem(&cfg, &port);
    struct tc_stat *s = stat_of(port, p.tc);
    if (!c || !s)
        return -1;
    __u64 before = s->ce_marked;
    red_mark(skb, &p, c, s, (__s64)skb->cb[0]);
    return s->ce_marked != before;
}}
"""
# Ethernet + IPv4 (DSCP 26, ECT(0)) + UDP to 4791: a RoCE packet's headers
FRAME = (bytes(6) + bytes.fromhex("02524c000101") + struct.pack("!H", 0x0800)
         + struct.pack("!BBHHHBBH4s4s", 0x45, 26 << 2 | 0b10, 48, 0, 0x4000, 64, 17, 0,
                       bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
         + struct.pack("!HHHH", 49152, 4791, 28, 0) + bytes(20))



class Probe:
    """fabric.bpf.c plus red_probe, loaded; `marks(depth, draw)` is red_mark's decision."""

    def __init__(self, tmp_path, cfg: bytes):
        src = tmp_path / "probe.bpf.c"
        src.write_text(PROBE.format(source=SOURCE.resolve()))
        self.obj = libbpf.BpfObject(libbpf.compile_object(src, tmp_path / "probe.bpf.o"))
        self.fd = self.obj.prog_fd("red_probe")
        libbpf.update(self.obj.map_fd("cfg"), PORT, cfg)
        self.run = libbpf.lib().bpf_prog_test_run_opts
        self.run.restype, self.run.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.c_void_p]

    def marks(self, depth: int, draw: int) -> bool:
        ctx = bytearray(SKB_CB + 20)
        struct.pack_into("=I", ctx, SKB_MARK, draw)
        struct.pack_into("=5I", ctx, SKB_CB, depth, ROCE_TC, PORT, 0, 0)
        retval, out = run_once(self.run, self.fd, FRAME, bytes(ctx))
        assert retval in (0, 1), f"red_probe found no cfg/stats for port {PORT}"
        assert (out[15] & 0b11 == 0b11) == bool(retval)  # CE in the IP header
        return bool(retval)

    def close(self) -> None:
        self.obj.close()


def leaf_cfg(plan=PLAN) -> bytes:
    """A leaf port's cfg as the controller fills it (ECN on)."""
    leaf = next(n for n in plan.nodes if n.name == "leaf1")
    return pack_cfg(plan, leaf, 2)


def evidence(th: dict[str, int]) -> Evidence:
    return Evidence(lab="t", source="unit", window_s=1.0, dilation=1.0, rate_bps=None,
                    thresholds=th, kinds={}, peers={}, ports=[], paused_s={}, metrics={})


def depths(th: dict[str, int]) -> list[int]:
    kmin, kmax = th["kmin"], th["kmax"]
    inside = [kmin + round((kmax - kmin) * f) for f in (0.001, 0.1, 0.25, 0.5, 0.75, 0.9, 0.999)]
    return [0, 1500, kmin - 1, kmin, kmin + 1, *inside, kmax - 1, kmax, kmax + 1, 2 * kmax]


def disagreements(probe: Probe, ev: Evidence, th: dict[str, int]) -> list[str]:
    """Depths where the BPF decision and the Python probability disagree: at p = 0 even
    the lowest draw must not mark, at p = 1 even the highest must; in between, a draw a
    little below p x 2^32 marks and one a little above does not."""
    out = []
    for depth in depths(th):
        p = mark_probability(ev, depth)
        if p == 0.0:
            want = {0: False}
        elif p == 1.0:
            want = {DRAW_MAX: True}
        else:
            edge = p * 2**32
            want = {int(edge * 0.999) - 2: True, min(DRAW_MAX, int(edge * 1.001) + 2): False}
        for draw, mark in want.items():
            if probe.marks(depth, draw) != mark:
                out.append(f"depth {depth} draw {draw}: python p={p:.6f}, bpf marked={not mark}")
    return out


@pytest.fixture
def probe(tmp_path):
    p = Probe(tmp_path, leaf_cfg())
    yield p
    p.close()


def test_the_dataplane_marks_where_the_python_rule_says_it_does(probe):
    th = thresholds(PLAN)
    assert disagreements(probe, evidence(th), th) == []


def test_a_threshold_moved_on_the_python_side_alone_is_caught(probe):
    th = thresholds(PLAN)
    for moved in ({"kmin": th["kmin"] * 11 // 10}, {"kmax": th["kmax"] * 9 // 10},
                  {"pmax_ppm": th["pmax_ppm"] // 2}):
        assert disagreements(probe, evidence(th | moved), th), moved


def test_a_threshold_moved_on_the_dataplane_side_alone_is_caught(tmp_path):
    th, cp = thresholds(PLAN), PLAN.congestion
    for moved in ({"kmin": cp.kmin * 11 // 10}, {"kmax": cp.kmax * 9 // 10}, {"pmax": cp.pmax / 2}):
        probe = Probe(tmp_path, leaf_cfg(replace(PLAN, congestion=replace(cp, **moved))))
        try:
            assert disagreements(probe, evidence(th), th), moved
        finally:
            probe.close()
