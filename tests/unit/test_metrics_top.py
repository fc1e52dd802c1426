"""`rocelab top`'s model and rendering, from captured scrapes (no lab, no terminal)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from rich.console import Console

from emulator.metrics import top
from emulator.metrics.model import Kind
from emulator.metrics.scrape import build, load_capture

CAPTURE = Path(__file__).parent / "fixtures" / "metrics" / "clos-2x4-cc"


@pytest.fixture(scope="module")
def scrapes():
    plan, outcomes = load_capture(CAPTURE, source="topologies/clos-2x4-cc.yaml")
    cur = build(plan, outcomes, clock=lambda: 0.0)
    prev = copy.deepcopy(cur)
    prev.at = cur.at - 1.0
    for fam in prev.families:  # one second earlier: counters and transfers were behind
        if fam.kind is Kind.COUNTER or fam.name == "rocelab_engine_transfer_done_bytes":
            fam.samples = [(labels, v * 0.9) for labels, v in fam.samples]
    return plan, prev, cur


def text(renderable, width: int = 120) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_view_ranks_ports_and_computes_rates(scrapes):
    plan, prev, cur = scrapes
    v = top.view(plan, prev, cur, rows=5)
    assert len(v.ports) == 5
    assert [r.queue_bytes for r in v.ports] == sorted((r.queue_bytes for r in v.ports), reverse=True)
    bottleneck = top.view(plan, prev, cur, rows=40)
    row = next(r for r in bottleneck.ports if (r.node, r.port) == ("leaf3", "decode1"))
    assert row.tx_bps and row.tx_bps > 0 and row.marks_per_s and row.marks_per_s > 0
    assert (v.sessions_up, v.sessions, v.down, v.ecmp) == (16, 16, [], [])
    assert len(v.transfers) == 4 and all(t.dst == "decode1" and t.bps for t in v.transfers)


def test_first_frame_has_no_rates(scrapes):
    plan, _, cur = scrapes
    v = top.view(plan, None, cur)
    assert all(r.tx_bps is None for r in v.ports) and all(t.bps is None for t in v.transfers)
    assert "-" in text(top.render(v))


def test_render_shows_every_section(scrapes):
    plan, prev, cur = scrapes
    out = text(top.render(top.view(plan, prev, cur)))
    for needle in ("rocelab top  lab tx-dev", "hottest ports", "peak queue", "marks/s",
                   "BGP sessions 16/16 established", "transfers (4 in flight)",
                   "prefill1 -> decode1", "DCQCN", "q quits"):
        assert needle in out, needle
    assert max(len(line) for line in out.splitlines()) <= 120


def test_render_flags_sessions_down_and_failed_collectors(scrapes):
    plan, prev, cur = scrapes
    broken = copy.deepcopy(cur)
    for fam in broken.families:
        if fam.name in ("rocelab_bgp_session_up", "rocelab_bgp_sessions_established"):
            fam.samples = [(lb, 0.0 if lb.get("node") == "leaf1" and lb.get("port", "spine2") == "spine2"
                            else v) for lb, v in fam.samples]
        if fam.name == "rocelab_scrape_collector_success":
            fam.samples = [(lb, 0.0 if lb["collector"] == "engine" else v) for lb, v in fam.samples]
    v = top.view(plan, prev, broken)
    assert v.down == ["leaf1:spine2"] and v.failed == ["engine"]
    out = text(top.render(v), width=160)
    assert "down: leaf1:spine2" in out and "failing: engine" in out


def test_trims_column_sums_a_port_s_trimmed_packets(scrapes):
    plan, prev, cur = scrapes
    trimmed = copy.deepcopy(cur)
    fam = next(f for f in trimmed.families if f.name == "rocelab_port_trim_packets_total")
    fam.samples = [(lb, 7.0 if (lb["node"], lb["port"], lb["tc"]) in
                    (("leaf3", "decode1", "2"), ("leaf3", "decode1", "0")) else 0.0)
                   for lb, _ in fam.samples]
    v = top.view(plan, prev, trimmed, rows=40)
    rows = {(r.node, r.port): r for r in v.ports}
    assert rows[("leaf3", "decode1")].trims == 14
    assert sum(r.trims for r in rows.values()) == 14  # nothing else trimmed
    assert not v.trimming and "trims" not in text(top.render(v), width=140)  # the lab does not trim
    v.trimming = True  # as on a lab whose topology turns trimming on
    out = text(top.render(v), width=140)
    assert "trims" in out and any("leaf3:decode1" in line and line.rstrip("│ ").split()[-1] == "14"
                                  for line in out.splitlines())
