"""Trace replay end to end: the shipped Mooncake fixture replayed on clos-2x4-cc, its
verdict, cache hits and bytes checked against the arithmetic of the pure parts, and a
replay's report in a real browser (on the exit-11 replay's report: a module of its own
once replayed 8 s of trace again for the report alone)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import yaml

from emulator.engine.kv import model
from emulator.replay import reader
from emulator.replay.placement import BLOCK_TOKENS, Placer
from emulator.replay.scaling import Scale
from tests.browser import check_report

from .conftest import PREFIX, cli, make_lab

TRACE = "tests/fixtures/replay/mooncake-conversation-30s.jsonl"
WINDOW_S = 12


@pytest.fixture(scope="module")
def cc(clos_cc):
    return clos_cc  # shared: the experiment below heals the link it fails


@pytest.fixture(scope="module")
def replayed(cc, tmp_path_factory):
    out = tmp_path_factory.mktemp("replay")
    res = cli("replay", cc.name, TRACE, "--for", f"{WINDOW_S}s", "--placement", "round-robin",
              "--prefix-cache", "20GiB", "--budget", "60s", "--min-attainment", "100",
              "--out", str(out), "--json", timeout=300)
    return json.loads(res.stdout) | {"out": out}


def expected() -> tuple[int, int, list[int]]:
    """(cached blocks, real bytes, lab bytes per request) by the pure parts, as the replay
    must have computed them (round-robin: placement does not depend on timing)."""
    bpt = model("llama3-70b").bytes_per_token()
    requests = reader.read(TRACE, 0, WINDOW_S)
    placer = Placer("round-robin", [f"prefill{i}" for i in range(1, 5)],
                    [f"decode{i}" for i in range(1, 5)], 20 << 30, BLOCK_TOKENS * bpt)
    placed = [placer.place(r) for r in requests]
    scale = Scale(4000.0, 1.0)
    return (sum(p.cached_blocks for p in placed), sum(p.tokens * bpt for p in placed),
            [scale.wall_bytes(p.tokens * bpt) for p in placed])


def test_every_request_is_replayed_within_a_generous_budget(replayed):
    v = replayed["verdict"]
    assert v["requests"] == len(reader.read(TRACE, 0, WINDOW_S)) > 20
    assert v["failed"] == 0 and v["integrity_ok"] and v["attainment"] == 1.0
    assert replayed["scheduler"]["max_in_flight"] >= 2  # the trace's bursts overlap


def test_cache_hits_and_bytes_moved_match_the_arithmetic(replayed):
    hits, real, lab = expected()
    v = replayed["verdict"]
    assert hits > 0 and v["cache"]["hit_blocks"] == hits  # the shared system-prompt block
    assert v["bytes_real"] == real
    assert [r["moved"] for r in replayed["requests"]] == lab  # what each engine moved
    assert v["bytes_moved"] == sum(lab)
    saved = sum(r["cached_tokens"] for r in replayed["requests"])
    assert v["cache"]["bytes_saved"] == saved * model("llama3-70b").bytes_per_token() > 0


def test_every_request_crossed_a_spine_and_the_scale_is_the_labs(replayed):
    rows = [r for r in replayed["requests"] if r["moved"]]
    assert all(r["spines"] for r in rows)
    assert sum(replayed["verdict"]["spines"].values()) == pytest.approx(
        sum(r["bytes_real"] for r in rows), rel=1e-6, abs=len(rows))
    assert set(replayed["verdict"]["spines"]) <= {"spine1", "spine2"}
    assert replayed["scale"] == {"dilation": 4000.0, "time_scale": 1.0, "size_factor": 1 / 4000}


def test_the_report_has_the_replay_plots_and_tables(replayed):
    out = Path(replayed["out"])
    page = (out / "report.html").read_text()
    for element in ("id='replay'", "id='replay-verdict'", "id='replay-missed'", "id='replay-paths'",
                    "id='replay-handoff-cdf'", "id='replay-load'", "id='replay-spine-load'"):
        assert element in page
    for name in ("replay_handoff_cdf.png", "replay_load.png", "replay_spine_load.png"):
        assert (out / name).stat().st_size > 5000
    assert json.loads((out / "results.json").read_text())["kind"] == "replay"


def test_attainment_below_the_minimum_exits_11_and_its_report_renders(cc, tmp_path):
    """A budget nobody meets: exit 11 after the results; the report is written all the same,
    and in a real browser (headless Chromium, tests/browser.py) every plot is decoded and
    laid out and every table has rows -- the missed requests' too (with none it is empty)."""
    out = tmp_path / "out"
    res = cli("replay", cc.name, TRACE, "--for", "4s", "--budget", "1us", "--min-attainment", "50",
              "--json", "--out", str(out), check=False, timeout=120)
    assert res.returncode == 11, res.stderr
    assert "--min-attainment: 0.0% of requests met" in res.stderr
    block, end = json.JSONDecoder().raw_decode(res.stdout)  # the results, then the error
    assert block["verdict"]["attainment"] == 0.0
    assert json.loads(res.stdout[end:])["error"]["code"] == 11
    assert json.loads((out / "results.json").read_text())["kind"] == "replay"
    page = check_report(out / "report.html", min_imgs=4, min_tables=4)
    figures = {i["figure"] for i in page.imgs}
    assert {"replay-handoff-cdf", "replay-load", "replay-spine-load"} <= figures, figures
    tables = {t["id"]: t for t in page.tables}
    for tid in ("replay-verdict", "replay-paths", "replay-missed"):
        assert tid in tables and tables[tid]["rows"] >= 2, (tid, tables.get(tid))
    assert "Trace replay" in page.probe["headings"]


def test_an_experiment_replays_the_trace_under_its_fault(cc, tmp_path):
    """experiments/trace-replay.yaml, shortened, with a budget no request can miss: the
    replay runs on the timeline beside its flow, the link fails and heals under it, every
    request completes intact and the expect lines see measured.replay."""
    exp = yaml.safe_load(Path("experiments/trace-replay.yaml").read_text())
    exp["replay"] |= {"for": "10s", "budget": "60s",
                      "trace": str(Path("traces/mooncake-conversation-excerpt.jsonl").resolve())}
    exp["topology"] = str(Path("topologies/clos-2x4-cc.yaml").resolve())
    exp["actions"] = [{"at": "3s", "fault": {"fail": "link", "a": "leaf1", "b": "spine1"}},
                      {"at": "6s", "fault": {"heal": "link", "a": "leaf1", "b": "spine1"}}]
    exp["expect"] = ["measured.replay_failed == 0", "measured.replay_attainment == 1",
                     "measured.replay.verdict.integrity_ok"]
    path = tmp_path / "trace-replay.yaml"
    path.write_text(yaml.safe_dump(exp))
    cli("run", str(path), "--name", cc.name, "--keep", "--out", str(tmp_path / "out"), timeout=300)
    r = json.loads((tmp_path / "out" / "results.json").read_text())
    block = r["measured"]["replay"]
    assert block["verdict"]["requests"] == len(reader.read(exp["replay"]["trace"], 0, 10)) > 10
    assert [e["action"] for e in r["events"] if e["kind"] == "fault"] == ["fail", "heal"]
    assert all(e["ok"] for e in r["expectations"])
    fail_t = next(e["t_s"] for e in r["events"] if e.get("action") == "fail")
    assert any(q["start_s"] - 1 <= fail_t <= q["end_s"] + 1 for q in block["requests"])  # under it
    assert "id='replay-verdict'" in (tmp_path / "out" / "report.html").read_text()


def test_striped_replay_on_a_shaped_rail_fabric_loads_every_rail(tmp_path):
    """rail-4x8 shaped like clos-2x4-cc: a replay with --stripe moves each handoff in
    64 KiB slices over the 4 NICs, and every rail's NICs (kernel counters) carry about a
    quarter of what the prefill hosts sent."""
    topo = yaml.safe_load(Path("topologies/rail-4x8.yaml").read_text())
    topo["congestion"] = yaml.safe_load(Path("topologies/clos-2x4-cc.yaml").read_text())["congestion"]
    path = tmp_path / "rail-4x8-cc.yaml"
    path.write_text(yaml.safe_dump(topo))
    with contextlib.contextmanager(make_lab)(str(path), f"{PREFIX}rrail") as lab:
        cli("replay", lab.name, TRACE, "--for", "1s", "--op", "write", "--budget", "60s",
            timeout=300)  # engines up, neighbours resolved
        before = {r["rail"]: r["tx_bytes"] for r in lab.status()["rails"]}
        # the trace's first second: its 10 requests all arrive at 0 (6 s held 29, 24 s of
        # wall time at --time-scale 4, for the same per-rail shares)
        res = cli("replay", lab.name, TRACE, "--for", "1s", "--op", "write", "--stripe",
                  "--time-scale", "4", "--budget", "60s", "--json", timeout=300)
        after = {r["rail"]: r["tx_bytes"] for r in lab.status()["rails"]}
    block = json.loads(res.stdout)
    moved = [r for r in block["requests"] if r["moved"]]
    assert block["verdict"]["failed"] == 0 and len(moved) >= 5
    assert all(r["rails"] == [0, 1, 2, 3] for r in moved)  # 2 QPs on each NIC
    assert sorted(block["verdict"]["rails"]) == ["0", "1", "2", "3"]
    sent = {rail: after[rail] - before.get(rail, 0) for rail in after}
    quarter = sum(r["moved"] for r in moved) / 4
    assert all(0.75 * quarter < sent[rail] < 1.5 * quarter for rail in range(4)), (sent, quarter)
