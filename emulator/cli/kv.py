from __future__ import annotations

import contextlib
import json
from pathlib import Path

import click
from rich.console import Console

from .. import lab, report, state, workload
from ..engine.job import Job, Op
from ..engine.kv import DTYPE_BYTES, MODELS, KvLayout, describe, model
from ..errors import EngineError, IntegrityError
from ..report import record
from ..units import Dilation, parse_duration
from .names import LAB
from .options import check_transport, engine_options, max_duration_option
from .progress import byte_progress


@click.command("kv")
@click.argument("name", type=LAB)
@click.option("--model", "model_name", type=click.Choice(sorted(MODELS)), default="llama3-8b",
              show_default=True, help="Model whose KV cache is moved.")
@click.option("--tokens", default=1024, show_default=True, type=click.IntRange(min=1),
              help="Prompt tokens per request.")
@click.option("--dtype", type=click.Choice(sorted(DTYPE_BYTES)), default="fp16", show_default=True)
@click.option("--block", "tokens_per_block", default=16, show_default=True, type=click.IntRange(min=1),
              help="Tokens per KV block.")
@click.option("--pairs", help="SRC:DST,... (default: prefill1:decode1, prefill2:decode2, ...).")
@click.option("--requests", default=None, type=click.IntRange(min=1, max=100000),
              help="Handoffs to run (default: one per pair).")
@click.option("--concurrency", default=None, type=click.IntRange(min=1, max=1024),
              help="Handoffs at once (default: one per pair).")
@max_duration_option
@click.option("--json", "as_json", is_flag=True, help="Print every request and the aggregate as JSON.")
@engine_options
def command(name: str, model_name: str, tokens: int, dtype: str, tokens_per_block: int,
            pairs: str | None, requests: int | None, concurrency: int | None, max_duration: str,
            op: str, transport: str, evs: int, qps: int, mtu: int, as_json: bool,
            out: str | None) -> None:
    """KV-cache handoffs from prefill to decode hosts, sized from a model.

    Example: rocelab kv clos-2x4 --model llama3-70b --tokens 512 --requests 8 --concurrency 4
    """
    check_transport(op, transport)
    lab.require_root()
    plan = state.lab_plan(name)
    pair_list = workload.parse_pairs(plan, pairs)
    requests = len(pair_list) if requests is None else requests  # 0 is a usage error (64)
    concurrency = len(pair_list) if concurrency is None else concurrency
    kv = {"model": model_name, "tokens": tokens, "dtype": dtype, "tokens_per_block": tokens_per_block}
    job = Job(Op(op), kv=kv, qps=qps, mtu=mtu, transport=transport, evs=evs,
              timeout_s=parse_duration(max_duration, "--max-duration"),
              extra={"progress_s": record.SAMPLE_EVERY_S} if out else {})
    layout = KvLayout(model(model_name), tokens, dtype, tokens_per_block)
    rec = record.Recorder(plan)
    with byte_progress(f"{requests} x {model_name} {tokens} tokens", requests * job.payload_bytes,
                       quiet=as_json) as tick, (rec if out else contextlib.nullcontext()):
        res = workload.run_kv(plan, pair_list, job, requests, concurrency,
                              rec.also(tick) if out else tick)
    res["sizing"] = describe(layout)
    if out:
        flow = {"name": f"{requests} handoffs (all)",
                "src": ",".join(sorted({s.name for s, _ in pair_list})),
                "dst": ",".join(sorted({d.name for _, d in pair_list}))}
        senders = [(s.name, d.name) for s, d in pair_list[:requests]]
        report.save(Path(out), rec.results("kv", res, flow, senders), plan)
    if as_json:
        click.echo(json.dumps(res, indent=2))
    else:
        _print(res, out, plan.dilation if plan.congestion else None)
    failed = [f"{r['src']} -> {r['dst']}: {r.get('error')}" for r in res["requests"]
              if r.get("failed")]
    if failed:
        raise EngineError(f"handoffs failed: {'; '.join(failed[:4])}")
    if not res["aggregate"]["integrity_ok"]:
        bad = [f"{r['src']} -> {r['dst']}" for r in res["requests"] if not r.get("integrity_ok")]
        raise IntegrityError(f"handoffs with differing digests: {', '.join(bad[:4])}")


def _print(res: dict, out: str | None, dilation: Dilation | None) -> None:
    a = res["aggregate"]
    console = Console()
    console.print(res["sizing"], soft_wrap=True)
    real = f" ({dilation.real_bps(a['goodput_gbps']):.1f} Gbit/s real-equivalent)" if dilation else ""
    console.print(f"{a['transfers']} handoffs, {a['bytes']} bytes in {a['wall_s']:.3f} s = "
                  f"{a['goodput_gbps']:.3f} Gbit/s{real} aggregate; handoff p50 {a['handoff_p50_s']:.3f} s, "
                  f"p99 {a['handoff_p99_s']:.3f} s, max {a['handoff_max_s']:.3f} s", soft_wrap=True)
    console.print(f"retransmitted {a['retransmitted_packets']}, NAKs {a['naks_rx']}, timeouts "
                  f"{a['timeouts']}, bad ICRC drops {a['bad_icrc']}; QPs per spine "
                  f"{', '.join(f'{s} {n}' for s, n in sorted(a['qps_per_spine'].items()))}; integrity "
                  + ("[green]ok[/]" if a["integrity_ok"] else "[red]FAILED[/]"),
                  soft_wrap=True)
    if out:
        console.print(f"report: {Path(out) / 'report.html'} (and report.md, plots, results.json)")
