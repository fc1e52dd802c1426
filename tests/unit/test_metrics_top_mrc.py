"""`rocelab top`'s MRC section from scrapes holding the engine collector's rocelab_mrc_*
series (fake stats replies in the engine's schema) beside a captured lab's families."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from rich.console import Console

from emulator.metrics import top
from emulator.metrics.collectors.engine import Collector
from emulator.metrics.scrape import build, load_capture

FIXTURES = Path(__file__).parent / "fixtures"
CONNS = json.loads((FIXTURES / "mrc" / "connections.json").read_text())


def text(renderable, width: int = 160) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def with_mrc(scrape, plan, stats: dict):
    out = copy.deepcopy(scrape)
    out.families += [f for f in Collector.parse(stats, plan) if f.name.startswith("rocelab_mrc_")]
    return out


@pytest.fixture(scope="module")
def lab():
    plan, outcomes = load_capture(FIXTURES / "metrics" / "clos-2x4-cc",
                                  source="topologies/clos-2x4-cc.yaml")
    return plan, build(plan, outcomes, clock=lambda: 0.0)


def stats(*by_node: tuple[str, list[dict]]) -> dict:
    return {node: {"event": "stats", "qps": {}, "mrc": conns} for node, conns in by_node}


def test_no_mrc_connections_no_section(lab):
    plan, cur = lab
    v = top.view(plan, None, cur)
    assert v.mrc == [] and "MRC connections" not in text(top.render(v))


def test_rows_show_evs_retirements_trims_and_path_shares(lab):
    plan, base = lab
    receiver = dict(CONNS["skewed"], paths=[], trim_nacks_sent=5, trim_nacks_received=0)
    cur = with_mrc(base, plan, stats(("prefill1", [CONNS["balanced"]]),
                                     ("prefill2", [CONNS["skewed"], CONNS["retired"]]),
                                     ("decode2", [receiver])))
    v = top.view(plan, None, cur)
    by = {r.conn: r for r in v.mrc}
    assert [r.conn for r in v.mrc][0] == "0x5e6f"  # the most retired EVs first
    assert set(by) == {"0x1a2b", "0x3c4d", "0x5e6f"} and by["0x3c4d"].node == "prefill2"
    r = by["0x5e6f"]
    assert (r.good, r.retired, r.evs, r.retirements, r.trim_nacks) == (2, 6, 8, 6, 5)
    ev, share = by["0x3c4d"].busiest
    assert ev in ("49152", "49169") and share == pytest.approx(6000 / 12600)
    assert by["0x3c4d"].idlest[1] == pytest.approx(100 / 12600)
    assert by["0x1a2b"].busiest[1] == pytest.approx(1 / 8, rel=0.01)
    out = text(top.render(v))
    for needle in ("MRC connections (3)", "EVs good", "trim NACKs", "prefill3->decode1 0x5e6f",
                   "2/8", f"EV {ev} 47.6%", "0.8%"):
        assert needle in out, (needle, out)


def test_shares_are_of_the_bytes_between_scrapes(lab):
    """Cumulatively the connection looks skewed; in the last second it sprayed evenly."""
    plan, base = lab
    before = with_mrc(base, plan, stats(("prefill2", [CONNS["skewed"]])))
    even = copy.deepcopy(CONNS["skewed"])
    for p in even["paths"]:
        p["bytes"] += 4096 * 500
    now = with_mrc(base, plan, stats(("prefill2", [even])))
    before.at = now.at - 1.0
    [r] = top.view(plan, before, now).mrc
    assert r.busiest[1] == pytest.approx(1 / 8) and r.idlest[1] == pytest.approx(1 / 8)
    [r] = top.view(plan, None, now).mrc  # first frame: since the connection started
    assert r.busiest[1] == pytest.approx(6500 / 16600)


def test_a_real_engine_stats_reply_gives_one_row_per_connection(lab):
    """Captured mid-transfer: the receiver's entry of 0x7ca is not a second row; the
    finished connections of prefill1->decode1 are one row of their own."""
    plan, base = lab
    cur = with_mrc(base, plan, json.loads((FIXTURES / "mrc" / "engine-stats.json").read_text()))
    rows = {(r.node, r.conn, r.flow): r for r in top.view(plan, None, cur).mrc}
    assert set(rows) == {("prefill2", "0x7ca", "prefill2->decode2"),
                         ("prefill1", "finished", "prefill1->decode1")}
    live = rows[("prefill2", "0x7ca", "prefill2->decode2")]
    assert (live.good, live.evs, live.paths) == (16, 16, 16)
    assert rows[("prefill1", "finished", "prefill1->decode1")].busiest is None
    assert "prefill1->decode1 finished" in text(top.render(top.view(plan, None, cur)))
