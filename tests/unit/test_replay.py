"""Trace replay's pure parts: the reader, placement, the prefix cache, scaling, the verdict."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from emulator.engine.kv import model
from emulator.errors import ExitCode
from emulator.replay import reader, verdict
from emulator.replay.placement import BLOCK_TOKENS, Placer, PrefixCache
from emulator.replay.reader import Request, TraceError
from emulator.replay.scaling import Scale, decode_step_s, default_budget_s

FIXTURE = Path(__file__).parent.parent / "fixtures" / "replay" / "mooncake-conversation-30s.jsonl"


def line(t: float = 0, tokens: int = 1000, out: int = 10, blocks: str = "[0, 1]") -> str:
    return f'{{"timestamp": {t}, "input_length": {tokens}, "output_length": {out}, "hash_ids": {blocks}}}'


# --- reader ---------------------------------------------------------------------------


def test_the_fixture_reads_whole_and_in_a_window():
    every = reader.read(FIXTURE)
    assert len(every) == 87 and every[0].input_tokens == 6758 and every[0].blocks[:2] == (0, 1)
    window = reader.read(FIXTURE, start_s=3, for_s=6)
    assert window and all(0 <= r.t_ms < 6000 for r in window)  # shifted to the window's start
    assert [r.index for r in window] == list(range(len(window)))
    assert len(window) == sum(1 for r in every if 3000 <= r.t_ms < 9000)


@pytest.mark.parametrize("text, where", [
    (line() + "\n" + '{"timestamp": 1, "input_length": -5, "output_length": 1}', "line 2: input_length"),
    (line() + "\n\n" + "{not json", "line 3: not a JSON object"),
    (line() + "\n" + '{"timestamp": 1, "output_length": 1, "hash_ids": []}', "line 2: input_length: missing"),
    (line() + "\n" + line(1, blocks='[0, "x"]'), "line 2: hash_ids"),
    (line() + "\n" + line(1).replace("output_length", "output_lenght"), "line 2: unknown field"),
    (line(5) + "\n" + line(4), "line 2: timestamp 4 ms is before"),
    (line(tokens=1.5), "line 1: input_length: must be an integer"),
    ("[1, 2]", "line 1: not a JSON object"),
    ("timestamp_ms,input_tokens\n1,2", "line 1: a CSV trace starts with the header"),
    ("timestamp_ms,input_tokens,output_tokens\n1,2,3\n4,5", "line 3: 2 fields"),
    ("timestamp_ms,input_tokens,output_tokens,prefix_blocks\n1,abc,3,", "line 2: input_tokens"),
])
def test_a_bad_line_is_one_error_naming_its_line_and_field(text, where):
    with pytest.raises(TraceError) as e:
        reader.parse(text, "t.jsonl")
    assert where in str(e.value) and "\n" not in str(e.value)
    assert e.value.exit_code == ExitCode.BAD_FILE


def test_rocelab_formats_read_like_mooncake():
    csv = "timestamp_ms,input_tokens,output_tokens,prefix_blocks\n0,1024,5,7 8\n2500,600,1,\n"
    jsonl = ('{"timestamp_ms": 0, "input_tokens": 1024, "output_tokens": 5, "prefix_blocks": [7, 8]}\n'
             '{"timestamp_ms": 2500, "input_tokens": 600, "output_tokens": 1}\n')
    want = [Request(0, 0, 1024, 5, (7, 8)), Request(1, 2500, 600, 1, ())]
    assert reader.parse(csv) == want == reader.parse(jsonl)


def test_gaps_are_kept_and_equal_timestamps_allowed():
    reqs = reader.parse("\n".join([line(0), line(0), line(600_000)]))
    assert [r.t_ms for r in reqs] == [0, 0, 600_000]


def test_empty_files_and_empty_windows_are_refused(tmp_path):
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n  \n")
    with pytest.raises(TraceError, match="empty"):
        reader.read(empty)
    with pytest.raises(TraceError, match="no request in the window --from 100s"):
        reader.read(FIXTURE, start_s=100)


def test_a_fifo_or_directory_is_refused_unread(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    for path in (fifo, tmp_path):
        with pytest.raises(TraceError, match="not a regular file"):
            reader.read(path)
    with pytest.raises(TraceError, match="cannot read"):
        reader.read(tmp_path / "missing.jsonl")


# --- prefix cache and placement --------------------------------------------------------


def test_the_prefix_cache_hits_leading_blocks_and_evicts_the_oldest():
    cache = PrefixCache(capacity=3 * 100 + 99, block_bytes=100)  # 3 whole blocks
    assert cache.slots == 3
    cache.admit([1, 2])
    assert cache.hits([1, 2, 9]) == 2 and cache.hits([2, 1]) == 2 and cache.hits([9, 1]) == 0
    cache.admit([1, 5])  # 1 refreshed, 5 in, 2 is the oldest now... and stays (3 slots)
    assert len(cache) == 3
    cache.admit([6])  # evicts 2, the least recently used
    assert cache.hits([2]) == 0 and cache.hits([1, 5, 6]) == 3
    assert PrefixCache(0, 100).hits([1]) == 0


def test_round_robin_walks_both_pools():
    p = Placer("round-robin", ["p1", "p2"], ["d1", "d2", "d3"])
    got = [(x.prefill, x.decode) for x in (p.place(Request(i, 0, 100, 1)) for i in range(4))]
    assert got == [("p1", "d1"), ("p2", "d2"), ("p1", "d3"), ("p2", "d1")]


def test_least_loaded_takes_the_host_with_fewest_outstanding_bytes():
    load = {"p1": 500, "p2": 100, "d1": 0, "d2": 50}
    p = Placer("least-loaded", ["p1", "p2"], ["d1", "d2"], load=load.__getitem__)
    x = p.place(Request(0, 0, 100, 1))
    assert (x.prefill, x.decode) == ("p2", "d1")


def test_prefix_affinity_follows_the_cache_and_saves_its_tokens():
    bpt = 10
    p = Placer("prefix-affinity", ["p1"], ["d1", "d2"], cache_bytes=10 * BLOCK_TOKENS * bpt,
               block_bytes=BLOCK_TOKENS * bpt)
    first = p.place(Request(0, 0, 1500, 1, (1, 2, 3)))  # no hits anywhere: the idler, d1
    other = p.place(Request(1, 0, 600, 1, (7, 8)))  # d1 has more assigned: d2
    again = p.place(Request(2, 0, 1600, 1, (1, 2, 4, 5)))
    assert (first.decode, other.decode, again.decode) == ("d1", "d2", "d1")
    assert (first.cached_blocks, again.cached_blocks) == (0, 2)
    assert again.tokens == 1600 - 2 * BLOCK_TOKENS and again.cached_tokens == 1024
    whole = p.place(Request(3, 0, 1000, 1, (1, 2)))  # the whole prompt cached: nothing moves
    assert whole.tokens == 0


def test_an_unknown_placement_or_an_empty_pool_is_refused():
    with pytest.raises(Exception, match="--placement: unknown 'random'"):
        Placer("random", ["p"], ["d"])
    with pytest.raises(Exception, match="prefill and decode hosts"):
        Placer("round-robin", [], ["d"])


# --- scaling -------------------------------------------------------------------------------


def test_scaling_keeps_offered_load_and_the_transfer_to_gap_ratio():
    """A 4 GB request every 2 s on a 400G link, replayed at D = 4000, K = 1 and K = 2."""
    real_bytes, gap_s, real_bps, dilation = 4e9, 2.0, 400e9, 4000.0
    for k in (1.0, 2.0):
        s = Scale(dilation, k)
        lab_bytes, lab_gap, lab_bps = s.wall_bytes(int(real_bytes)), s.wall_s(gap_s), real_bps / dilation
        assert lab_bytes / lab_gap / lab_bps == pytest.approx(real_bytes / gap_s / real_bps, rel=1e-6)
        lab_transfer = lab_bytes * 8 / lab_bps
        assert lab_transfer / lab_gap == pytest.approx(real_bytes * 8 / real_bps / gap_s, rel=1e-6)
        assert s.real_s(lab_transfer) == pytest.approx(real_bytes * 8 / real_bps, rel=1e-6)
    assert Scale(4000.0).wall_bytes(0) == 0 and Scale(4000.0).wall_bytes(1) == 1
    with pytest.raises(Exception, match="--time-scale"):
        Scale(4000.0, 0)


def test_the_default_budget_is_one_decode_step():
    # 70.6e9 parameters x 2 B over 4 H100s at 60 % of 3.35 TB/s each
    assert decode_step_s("llama3-70b") == pytest.approx(70.6e9 * 2 / (4 * 3.35e12 * 0.6))
    assert default_budget_s("llama3-70b") == 0.018
    assert default_budget_s("llama3-8b") < default_budget_s("llama3-405b")
    assert model("llama3-70b").bytes_per_token() == 327680


# --- verdict -------------------------------------------------------------------------------


def row(i: int, handoff: float, **kw) -> dict:
    base = {"index": i, "t_s": i * 0.5, "prefill": "p1", "decode": "d1", "input_tokens": 1024,
            "blocks": 2, "cached_blocks": 0, "cached_tokens": 0, "bytes_real": 1000, "bytes": 1, "moved": 1,
            "lateness_s": 0.0, "transfer_s": handoff, "handoff_s": handoff, "line_rate_s": 0.001,
            "start_s": i * 0.5, "end_s": i * 0.5 + handoff, "busy_at_start": 0, "spines": ["spine1"],
            "rails": [], "retransmitted_packets": 0, "timeouts": 0, "error": None, "integrity_ok": True}
    return base | kw


def test_the_verdict_counts_attainment_and_says_why_requests_missed():
    table = [row(0, 0.010), row(1, 0.020, cached_blocks=2, cached_tokens=1024),
             row(2, 0.300, busy_at_start=3), row(3, 0.400, retransmitted_packets=7),
             row(4, 0.500, line_rate_s=0.2), row(5, 0.0, error="engine: retry limit")]
    v = verdict.summarize(table, budget_s=0.050, bytes_per_token=100)
    assert (v["requests"], v["within_budget"], v["failed"]) == (6, 2, 1)
    assert v["attainment"] == pytest.approx(2 / 6, abs=1e-6)
    assert v["cache"] == {"blocks": 12, "hit_blocks": 2, "hit_ratio": pytest.approx(2 / 12, abs=1e-6),
                          "requests_with_hits": 1, "bytes_saved": 1024 * 100}
    why = {m["index"]: m["why"] for m in v["missed"]}
    assert why[2][0].startswith("waited behind others: 3 in flight")
    assert why[3] == ["retransmitted: 7 packets, 0 timeouts"]
    assert why[4][0].startswith("too big: 200.0 ms")
    assert why[5] == ["failed: engine: retry limit"]
    assert [m["index"] for m in v["missed"]][:3] == [4, 3, 2]  # worst first
    assert v["spines"] == {"spine1": 6000}


def test_load_over_time_conserves_bytes():
    table = [row(0, 0.25, bytes_real=10**9), row(3, 1.5, bytes_real=3 * 10**9)]
    load = verdict.load_over_time(table, bin_s=1.0)
    gbit = 8 / 1e9
    assert sum(load["offered_gbps"]) == pytest.approx(4e9 * gbit)
    assert sum(load["carried_gbps"]) == pytest.approx(4e9 * gbit)
    assert load["offered_gbps"][1] == pytest.approx(3e9 * gbit)  # request 3 arrives at 1.5 s


def test_prefix_affinity_leaves_a_busy_host_when_the_prefix_saves_less_than_its_queue():
    bpt, load = 10, {"p1": 0, "d1": 0, "d2": 0}
    p = Placer("prefix-affinity", ["p1"], ["d1", "d2"], cache_bytes=10 * BLOCK_TOKENS * bpt,
               block_bytes=BLOCK_TOKENS * bpt, load=load.__getitem__)
    assert p.place(Request(0, 0, 2048, 1, (0, 1, 2, 3))).decode == "d1"
    load["d1"] = BLOCK_TOKENS * bpt - 1  # queued: less than the one shared block saves
    assert p.place(Request(1, 0, 2048, 1, (0, 5, 6, 7))).decode == "d1"
    load["d1"] = 10 * BLOCK_TOKENS * bpt  # far busier than the prefix is worth
    assert p.place(Request(2, 0, 2048, 1, (0, 8, 9, 10))).decode == "d2"


# --- an experiment's replay: ---------------------------------------------------------------


def _experiment(tmp_path, replay: str) -> Path:
    (tmp_path / "t.jsonl").write_text(line(0) + "\n" + line(1000) + "\n")
    path = tmp_path / "e.yaml"
    path.write_text(f"name: e\ntopology: {Path('topologies/clos-2x4-cc.yaml').resolve()}\n"
                    "flows: [{name: f, src: prefill1, dst: decode1, size: 1MiB}]\n" + replay)
    return path


def test_an_experiments_replay_resolves_its_trace_beside_the_file(tmp_path):
    from emulator.experiment.spec import load

    exp, _ = load(_experiment(tmp_path, "replay: {trace: t.jsonl, for: 10s, prefix_cache: 20GiB}"))
    assert exp.replay is not None and exp.replay.trace == str(tmp_path / "t.jsonl")
    assert exp.replay.length == "10s" and exp.replay.placement == "round-robin"


@pytest.mark.parametrize("replay, problem", [
    ("replay: {trace: t.jsonl, model: gpt5}", "unknown model 'gpt5'"),
    ("replay: {trace: t.jsonl, for: 0s}", "replay.for"),
    ("replay: {trace: t.jsonl, placement: random}", "replay.placement"),
    ("replay: {trace: t.jsonl, prefix_cache: lots}", "replay.prefix_cache"),
    ("replay: {trace: t.jsonl, tokens: 5}", "replay.tokens"),
])
def test_a_bad_replay_section_is_a_spec_error_naming_the_key(tmp_path, replay, problem):
    from emulator.errors import SpecError
    from emulator.experiment.spec import load

    with pytest.raises(SpecError) as e:
        load(_experiment(tmp_path, replay))
    assert problem in str(e.value), str(e.value)


def test_an_experiments_trace_is_read_before_anything_runs(tmp_path):
    from emulator.experiment import replaying
    from emulator.experiment.spec import load
    from emulator.lab import load_topology

    exp, topo = load(_experiment(tmp_path, "replay: {trace: t.jsonl, from: 1h}"))
    with pytest.raises(TraceError, match="replay: .*no request in the window"):
        replaying.check(exp.replay, load_topology(topo)[1])


# --- the report's replay section ---------------------------------------------------------


def test_the_report_section_has_every_identified_plot_and_table(tmp_path):
    from emulator.report import replay as section
    from emulator.report import replay_plots

    table = [row(0, 0.010), row(1, 0.400, busy_at_start=2), row(2, 0.020, rails=[0, 1])]
    block = {"verdict": verdict.summarize(table, 0.050, 100), "requests": table,
             "scheduler": {"lateness_p99_s": 0.001, "overhead_share": 0.01, "max_in_flight": 2},
             "scale": {"dilation": 4000.0, "time_scale": 1.0, "size_factor": 0.00025},
             "budget_default": False}
    paths = replay_plots.draw(block, tmp_path)
    assert [p.name for p in paths] == list(section.PLOTS)
    page = section.html_section(block, tmp_path, lambda p, alt: f"<img alt='{alt}' src='{p.name}'>")
    for fid, _, _ in section.PLOTS.values():
        assert f"<figure id='{fid}'>" in page
    for tid in ("replay-verdict", "replay-paths", "replay-missed"):
        assert f"<table id='{tid}' class='replay'>" in page
    assert "<td>1</td>" in page and "waited behind others: 2 in flight" in page  # the miss, why
    assert "rail 1" in page and "| 1 | 400.00 ms |" in "\n".join(section.markdown_lines(block))


# --- the scheduler, on a fake engine -----------------------------------------------------


def test_the_scheduler_issues_every_request_and_accounts_for_it(monkeypatch):
    import threading

    from emulator.errors import EngineError
    from emulator.lab import load_topology
    from emulator.replay import scheduler as sched_mod
    from emulator.replay.scheduler import Options, Scheduler

    plan = load_topology("topologies/clos-2x4-cc.yaml")[1]
    both = threading.Barrier(2, timeout=30)  # the first two run at once, or the test fails
    calls = []

    def transfer(plan, src, dst, job, progress=None):
        calls.append((src.name, dst.name, job.size, job.op.value))
        if len(calls) <= 2:
            both.wait()
        if job.seed == 4:  # request 3
            raise EngineError(f"{dst.name}: transfer failed: retry limit")
        return {"bytes": job.size, "duration_s": 0.01, "integrity_ok": True,
                "qps": [{"spine": "spine1", "rail": None}]}

    monkeypatch.setattr(sched_mod.client, "transfer", transfer)
    monkeypatch.setattr(sched_mod, "ensure", lambda plan, hosts: None)
    reqs = [Request(0, 0, 1024, 1, (1, 2)), Request(1, 0, 1024, 1, (3, 4)),
            Request(2, 1, 512, 1, (7,)), Request(3, 2, 600, 1, (5, 6)),
            Request(4, 3, 1024, 1, (1, 2))]  # round-robin: decode1 again, which holds it all
    s = Scheduler(plan, reqs, Options(placement="round-robin", cache_bytes=1 << 30, time_scale=0.01))
    records = s.run()
    bpt = model("llama3-70b").bytes_per_token()
    assert [r.placed.request.index for r in records] == [0, 1, 2, 3, 4]
    assert [r.real_bytes for r in records] == [1024 * bpt, 1024 * bpt, 512 * bpt, 600 * bpt, 0]
    assert [r.wall_bytes for r in records] == [s.scale.wall_bytes(r.real_bytes) for r in records]
    assert records[4].placed.decode == "decode1" and records[4].placed.cached_blocks == 2
    assert len(calls) == 4 and s.max_inflight >= 2  # the cached prompt moved nothing
    assert all(op == "read" for *_, op in calls) and calls[0][:2] == ("prefill1", "decode1")
    assert records[3].error and "retry limit" in records[3].error
    assert all(v == 0 for v in s._outstanding.values())  # every byte accounted back
    table = verdict.rows(records, s.scale, {h: 400e9 for h in s.hosts})
    assert [r["error"] is None for r in table] == [True, True, True, False, True]
    assert table[4]["handoff_s"] == 0.0 and table[4]["moved"] == 0
