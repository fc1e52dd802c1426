"""Issuing a trace's requests on a running lab at their (scaled) arrival times.

One dispatcher thread walks the requests in arrival order: it waits for each one's wall
time, places it (placement.Placer: hosts and the prefix cache), and hands it to a pool of
`inflight` workers, each of which runs one engine transfer at a time (engine.client).
What it records per request is plain data for `verdict`: when it was due, when a worker
started it, the engine's result. It measures itself: how late each request started, and
the CPU its own threads spent (dispatcher and workers, each by its thread's clock: an
experiment's samplers share the process) against the run's wall time.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .. import workload
from ..engine import client
from ..engine.job import MAX_TRANSFER, Job, Op
from ..engine.kv import model as model_preset
from ..errors import RocelabError, SettingError
from ..hosts import ensure
from ..plan import Node, Plan
from ..spec import Role
from .placement import BLOCK_TOKENS, Placed, Placer
from .reader import Request
from .scaling import Scale

Progress = Callable[[int, int], None]  # (requests done, requests)
DEFAULT_INFLIGHT = 128


@dataclass(frozen=True)
class Options:
    model: str = "llama3-70b"
    dtype: str = "fp16"
    placement: str = "round-robin"
    op: Op = Op.READ
    cache_bytes: int = 0  # each decode host's prefix cache
    time_scale: float = 1.0
    inflight: int = DEFAULT_INFLIGHT
    mtu: int = 4096
    timeout_s: float = 120.0  # one transfer's (wall)
    descriptor: int = 0  # largest RDMA op (NIXL descriptors); 0: 1 MiB messages
    stripe: bool = False  # 64 KiB slices over the NICs, 2 QPs per NIC (Mooncake)
    extra: dict[str, Any] = field(default_factory=dict)  # into every Job's extra

    def __post_init__(self) -> None:
        if not 1 <= self.inflight <= 1024:
            raise RocelabError(f"--inflight: must be 1..1024 (got {self.inflight})")


@dataclass
class Record:
    """One request as the scheduler saw it: wall times from the run's zero."""

    placed: Placed
    real_bytes: int  # the KV bytes it moves on the modelled fabric
    wall_bytes: int  # what the lab moves for it (scaled)
    due_s: float
    dispatch_s: float = 0.0  # when the dispatcher handed it to the pool
    start_s: float = 0.0
    end_s: float = 0.0
    result: dict[str, Any] | None = None
    error: str | None = None
    busy_at_start: int = 0  # requests in flight on its prefill or decode host when it started


def pools(plan: Plan) -> tuple[list[Node], list[Node]]:
    """The prefill and decode hosts (the topology's roles), each able to run the engine."""
    out = []
    for role in (Role.PREFILL, Role.DECODE):
        hosts = [h for h in plan.hosts if h.role == role.value]
        if not hosts:
            raise RocelabError(f"lab {plan.lab} has no {role.value} hosts: replay places requests "
                               "on the topology's hosts.roles (prefill and decode)")
        for h in hosts:
            workload.require_engine(plan, h, "replay")
        out.append(hosts)
    return out[0], out[1]


def scale_of(plan: Plan, time_scale: float) -> Scale:
    if not plan.congestion:
        raise SettingError(f"lab {plan.lab} is not shaped (congestion.enabled: false): replay "
                           "scales the trace against its links' rates; use a shaped topology "
                           "such as clos-2x4-cc")
    return Scale(float(plan.dilation), time_scale)


class Scheduler:
    """One replay: `run()` issues every request and returns the records, in trace order."""

    def __init__(self, plan: Plan, requests: list[Request], opts: Options,
                 progress: Progress | None = None):
        self.plan, self.requests, self.opts, self.progress = plan, requests, opts, progress
        self.scale = scale_of(plan, opts.time_scale)
        prefill, decode = pools(plan)
        self.hosts = {h.name: h for h in (*prefill, *decode)}
        self.bytes_per_token = model_preset(opts.model).bytes_per_token(opts.dtype)
        self.placer = Placer(opts.placement, [h.name for h in prefill], [h.name for h in decode],
                             opts.cache_bytes, BLOCK_TOKENS * self.bytes_per_token, self._load)
        self.records: list[Record] = []
        self.max_inflight = 0
        self._lock = threading.Lock()
        self._outstanding: dict[str, int] = defaultdict(int)
        self._busy: dict[str, int] = defaultdict(int)
        self._inflight = self._done = 0
        self.t0 = self.wall_s = self.cpu_s = self.dispatch_cpu_s = self.worker_cpu_s = 0.0

    def _load(self, host: str) -> int:
        return self._outstanding[host]

    def run(self) -> list[Record]:
        ensure(self.plan, list(self.hosts.values()))
        cpu0 = time.process_time()
        self.t0 = time.monotonic()
        with ThreadPoolExecutor(self.opts.inflight, thread_name_prefix="replay") as pool:
            d0 = time.thread_time()
            for req in self.requests:
                due = self.scale.wall_s(req.t_ms / 1000)
                time.sleep(max(0.0, self.t0 + due - time.monotonic()))  # the timeline, not a sync
                rec = self._place(req, due)
                rec.dispatch_s = time.monotonic() - self.t0
                if rec.wall_bytes:
                    pool.submit(self._one, rec)
                else:  # the whole prompt was cached: nothing crosses, nothing to wait for
                    rec.start_s = rec.end_s = due
                    self._finish(rec)
            self.dispatch_cpu_s = time.thread_time() - d0
        self.wall_s = time.monotonic() - self.t0
        self.cpu_s = time.process_time() - cpu0
        return self.records

    def _place(self, req: Request, due: float) -> Record:
        with self._lock:
            placed = self.placer.place(req)
            real = placed.tokens * self.bytes_per_token
            rec = Record(placed, real, self.scale.wall_bytes(real), due)
            if rec.wall_bytes > MAX_TRANSFER:
                raise RocelabError(f"request {req.index}: {rec.wall_bytes} bytes on the lab, more "
                                   f"than one transfer may move ({MAX_TRANSFER >> 30} GiB): lower "
                                   "--time-scale")
            for h in (placed.prefill, placed.decode):  # real bytes: placement weighs them
                self._outstanding[h] += rec.real_bytes
            self.records.append(rec)
        return rec

    def _one(self, rec: Record) -> None:
        cpu0 = time.thread_time()
        try:
            self._transfer(rec)
        finally:
            with self._lock:
                self.worker_cpu_s += time.thread_time() - cpu0

    def _transfer(self, rec: Record) -> None:
        p = rec.placed
        with self._lock:
            rec.start_s = time.monotonic() - self.t0
            rec.busy_at_start = max(self._busy[p.prefill], self._busy[p.decode])
            for h in (p.prefill, p.decode):
                self._busy[h] += 1
            self._inflight += 1
            self.max_inflight = max(self.max_inflight, self._inflight)
        job = Job(self.opts.op, size=rec.wall_bytes, qps=max(1, len(self.hosts[p.prefill].addresses)),
                  mtu=self.opts.mtu, seed=p.request.index + 1, timeout_s=self.opts.timeout_s,
                  descriptor=self.opts.descriptor, stripe=self.opts.stripe,
                  extra={"flow": "replay", **self.opts.extra})
        try:
            rec.result = dict(client.transfer(self.plan, self.hosts[p.prefill],
                                              self.hosts[p.decode], job))
        except (RocelabError, OSError) as e:  # an engine gone: this request failed, not the run
            rec.error = str(e) or type(e).__name__
        rec.end_s = time.monotonic() - self.t0
        with self._lock:
            for h in (p.prefill, p.decode):
                self._busy[h] -= 1
            self._inflight -= 1
        self._finish(rec)

    def _finish(self, rec: Record) -> None:
        p = rec.placed
        with self._lock:
            for h in (p.prefill, p.decode):
                self._outstanding[h] -= rec.real_bytes
            self._done += 1
            done = self._done
        if self.progress:
            self.progress(done, len(self.requests))
