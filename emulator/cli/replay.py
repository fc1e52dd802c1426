from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from .. import lab, report, state
from ..engine.job import Op
from ..engine.kv import MODELS
from ..errors import EngineError, IntegrityError
from ..replay import run
from ..replay.placement import PLACEMENTS
from ..replay.scheduler import DEFAULT_INFLIGHT, Options
from ..replay.verdict import AttainmentError
from ..report import record
from ..units import parse_duration, parse_size
from .kv import _descriptor
from .names import LAB
from .options import DURATION, SIZE, writable_out


@click.command("replay")
@click.argument("name", type=LAB)
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--model", "model_name", type=click.Choice(sorted(MODELS)), default="llama3-70b",
              show_default=True, help="Model whose KV cache each request moves.")
@click.option("--from", "start", type=DURATION, default="0s", show_default=True,
              help="Start of the trace window (trace time).")
@click.option("--for", "length", type=DURATION, default=None,
              help="Length of the window (default: to the end).")
@click.option("--placement", type=click.Choice(PLACEMENTS), default="round-robin", show_default=True)
@click.option("--op", type=click.Choice([o.value for o in Op]), default="read", show_default=True,
              help="read: decode pulls (NIXL); write: prefill pushes (Mooncake, SGLang).")
@click.option("--descriptor", type=SIZE, default=None, callback=_descriptor,
              help="Post each handoff as RDMA ops of at most this size (NIXL descriptors, e.g. 16KiB).")
@click.option("--stripe", is_flag=True,
              help="Stripe each handoff in 64 KiB slices over the NICs, 2 QPs per NIC (Mooncake).")
@click.option("--prefix-cache", type=SIZE, default=None,
              help="Each decode host's prefix cache (LRU of 512-token blocks), e.g. 20GiB; default none.")
@click.option("--budget", type=DURATION, default=None,
              help="Handoff budget, real-equivalent (default: the model's decode step).")
@click.option("--time-scale", type=click.FloatRange(min=1e-6, max=1e6, min_open=True), default=1.0,
              show_default=True, help="Wall seconds per trace second (bytes scale with it).")
@click.option("--inflight", type=click.IntRange(1, 1024), default=DEFAULT_INFLIGHT, show_default=True,
              help="Requests moving at once, at most.")
@click.option("--min-attainment", type=click.FloatRange(0, 100), default=None,
              help="Exit 11 when fewer than this percentage of requests meet the budget.")
@click.option("--out", type=click.Path(file_okay=False), callback=writable_out,
              help="Also write DIR/results.json, plots and report.md/report.html.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
def command(name: str, trace: str, model_name: str, start: str, length: str | None, placement: str,
            op: str, descriptor: int, stripe: bool, prefix_cache: str | None, budget: str | None,
            time_scale: float, inflight: int, min_attainment: float | None, out: str | None,
            as_json: bool) -> None:
    """Replay a request trace as KV handoffs and judge them against a budget.

    Example: rocelab replay clos-2x4-cc traces/mooncake-conversation-excerpt.jsonl --for 30s
    """
    lab.require_root()
    plan = state.lab_plan(name)
    opts = Options(model=model_name, placement=placement, op=Op(op),
                   cache_bytes=parse_size(prefix_cache, "--prefix-cache") if prefix_cache else 0,
                   time_scale=time_scale, descriptor=descriptor, stripe=stripe,
                   inflight=inflight, extra={"progress_s": record.SAMPLE_EVERY_S} if out else {})
    budget_s = parse_duration(budget, "--budget", positive=True) if budget else None
    start_s = parse_duration(start, "--from")
    for_s = parse_duration(length, "--for", positive=True) if length else None
    rec = record.Recorder(plan)
    with rec if out else contextlib.nullcontext():
        block = run.replay(plan, trace, opts, budget_s, start_s, for_s)
    if out:
        report.save(Path(out), rec.results("replay", {"replay": block}, _flow(block)), plan)
    if as_json:
        click.echo(json.dumps(block, indent=1))
    else:
        _print(block, out)
    _verdict(block, min_attainment)


def _flow(block: dict[str, Any]) -> dict[str, str]:
    rows = block["requests"]
    return {"name": f"{len(rows)} replayed requests", "src": ",".join(sorted({r["prefill"] for r in rows})),
            "dst": ",".join(sorted({r["decode"] for r in rows}))}


def _verdict(block: dict[str, Any], min_attainment: float | None) -> None:
    v = block["verdict"]
    failed = [r for r in block["requests"] if r["error"]]
    if failed:
        raise EngineError(f"{len(failed)} of {v['requests']} requests failed; first: "
                          f"request {failed[0]['index']}: {failed[0]['error']}")
    if not v["integrity_ok"]:
        bad = [str(r["index"]) for r in block["requests"] if not r["integrity_ok"]]
        raise IntegrityError(f"requests whose digests differ: {', '.join(bad[:8])}")
    if min_attainment is not None and v["attainment"] * 100 < min_attainment:
        raise AttainmentError(f"--min-attainment: {v['attainment']:.1%} of requests met the "
                               f"{v['budget_s'] * 1000:g} ms budget; wanted at least {min_attainment:g}%")


def _print(block: dict[str, Any], out: str | None) -> None:
    v, s, c = block["verdict"], block["scheduler"], block["verdict"]["cache"]
    console = Console()
    console.print(f"{v['requests']} requests of {block['trace']['file']} ({block['model']}, "
                  f"{block['placement']}, {block['op']}); bytes x {block['scale']['size_factor']:.3g} "
                  f"on the lab (D = {block['scale']['dilation']:g}, time scale "
                  f"{block['scale']['time_scale']:g})", soft_wrap=True)
    console.print(f"attainment {v['attainment']:.1%} within {v['budget_s'] * 1000:g} ms; handoff p50 "
                  f"{v['handoff_p50_s'] * 1000:.2f} ms, p99 {v['handoff_p99_s'] * 1000:.2f} ms, p99.9 "
                  f"{v['handoff_p999_s'] * 1000:.2f} ms (real-equivalent)", soft_wrap=True)
    console.print(f"prefix cache: {c['hit_ratio']:.1%} of blocks hit, {c['bytes_saved'] / 1e9:.2f} GB "
                  f"saved; scheduler: lateness p99 {s['lateness_p99_s'] * 1000:.2f} ms, CPU "
                  f"{s['overhead_share']:.1%} of the run (with engine calls {s['client_share']:.1%}), "
                  f"{s['max_in_flight']} in flight at most",
                  soft_wrap=True)
    if v["missed_reasons"]:
        console.print("missed: " + ", ".join(f"{k} {n}" for k, n in v["missed_reasons"].items()),
                      soft_wrap=True)
    if out:
        console.print(f"report: {Path(out) / 'report.html'} (and report.md, plots, results.json)")
