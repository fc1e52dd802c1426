"""An experiment's `replay:`: the trace replayed on the run's timeline, beside its flows and
under its actions (a fault at 5 s hits the requests moving at 5 s). It runs as a
runner.Measure: started with the lab up just before the run's zero, joined when the run
is over; its block lands in results.json as `measured.replay` (docs/workloads.md)."""

from __future__ import annotations

import threading
import time
from typing import Any

from ..engine.job import Op
from ..errors import RocelabError
from ..plan import Plan
from ..replay import reader, run
from ..replay.scheduler import Options, pools, scale_of
from ..units import parse_duration, parse_size
from .spec import Replay


def options(r: Replay) -> Options:
    return Options(model=r.model, placement=r.placement, op=Op(r.op),
                   cache_bytes=parse_size(r.prefix_cache, "replay.prefix_cache") if r.prefix_cache else 0,
                   time_scale=r.time_scale, inflight=r.inflight, extra={"flow": "replay"},
                   descriptor=parse_size(r.descriptor, "replay.descriptor") if r.descriptor else 0,
                   stripe=r.stripe)


def window(r: Replay) -> tuple[float, float | None]:
    return parse_duration(r.start), parse_duration(r.length) if r.length is not None else None


def check(r: Replay, plan: Plan) -> None:
    """Before anything runs: the trace reads (every line), the lab has the pools and is shaped."""
    try:
        reader.read(r.trace, *window(r))
        pools(plan)
        scale_of(plan, r.time_scale)
    except RocelabError as e:
        e.args = (f"replay: {e}",)
        raise


class ReplayRun(threading.Thread):
    """The replay on its own thread, from the run's zero + `at`."""

    def __init__(self, r: Replay, plan: Plan, t0: float):
        super().__init__(name="replay", daemon=True)
        self.r, self.plan, self.start_at = r, plan, t0 + parse_duration(r.at)
        self.block: dict[str, Any] | None = None
        self.error: str | None = None
        self.t0 = t0

    def run(self) -> None:
        time.sleep(max(0.0, self.start_at - time.monotonic()))  # the timeline, not a sync
        budget = parse_duration(self.r.budget, positive=True) if self.r.budget is not None else None
        try:
            self.block = run.replay(self.plan, self.r.trace, options(self.r), budget, *window(self.r))
            self.block["started_s"] = round(self.start_at - self.t0, 4)
        except RocelabError as e:
            self.error = str(e)


def measure(r: Replay) -> Any:
    """A runner.Measure replaying `r` during the run; its Finish returns {"replay": block}."""
    def start(ctx: Any) -> Any:
        thread = ReplayRun(r, ctx.plan, ctx.t0)
        thread.start()

        def finish() -> dict[str, Any]:
            thread.join()
            if thread.block is None:
                return {"replay": {"error": thread.error or "the replay did not finish"}}
            v = thread.block["verdict"]  # scalars too: a compare run's rows show them per fabric
            return {"replay": thread.block, "replay_attainment": v["attainment"],
                    "replay_handoff_p99_ms": round(v["handoff_p99_s"] * 1e3, 3), "replay_failed": v["failed"]}
        return finish
    return start
