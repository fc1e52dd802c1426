"""Trace time and bytes onto a dilated lab, and back (docs/workloads.md, "Time scaling").

A lab at dilation D runs D times slower than the fabric it models: a link of real speed
C is shaped at C / D. Replaying the trace's bytes B at its arrival times would take D
times the trace's length. So both are scaled: a request of B real bytes arriving at trace
time t is issued at wall time t x K and moves B x K / D bytes (K: wall seconds per trace
second, `--time-scale`, default 1). On every shaped link the offered load (bytes per
second over its capacity) is then the trace's on the real fabric, and each request's
transfer time relative to the gaps between arrivals is the trace's: queueing is
preserved. A wall duration w is w / K real-equivalent seconds.

Not preserved: what does not scale with bytes -- per-packet and per-message costs (MTU,
headers, RTT, QP setup: a request has D / K times fewer packets than on the real
fabric), switch buffers and ECN/PFC thresholds relative to a request, and the engine's
CPU cost per byte.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..engine.kv import MODELS
from ..errors import RocelabError

HBM_BPS = 3.35e12  # bytes/s of one H100 SXM's HBM3
HBM_EFFICIENCY = 0.6  # share of it a decode step achieves reading the weights
# model preset -> (parameters, GPUs of one decode instance): a decode step reads every weight
SERVING = {"llama3-8b": (8.0e9, 1), "llama3-70b": (70.6e9, 4), "llama3-405b": (405e9, 8),
           "mixtral-8x7b": (46.7e9, 2), "qwen3-235b-a22b": (235e9, 8)}
WEIGHT_BYTES = 2  # bf16


@dataclass(frozen=True)
class Scale:
    """The mapping for one replay: dilation D of the lab and time scale K."""

    dilation: float
    time_scale: float = 1.0  # wall seconds per trace second

    def __post_init__(self) -> None:
        if not (math.isfinite(self.time_scale) and 0 < self.time_scale <= 1e6):
            raise RocelabError(f"--time-scale: must be a number in (0, 1000000] (got {self.time_scale})")

    @property
    def size_factor(self) -> float:
        """Bytes moved on the lab per real byte of the trace (K / D)."""
        return self.time_scale / self.dilation

    def wall_bytes(self, real_bytes: int) -> int:
        """A request's bytes on the lab: at least one, unless it moves none."""
        return max(1, round(real_bytes * self.size_factor)) if real_bytes > 0 else 0

    def wall_s(self, trace_s: float) -> float:
        return trace_s * self.time_scale

    def real_s(self, wall_s: float) -> float:
        return wall_s / self.time_scale


def decode_step_s(model: str) -> float:
    """One decode step of `model` (s): every weight read once from HBM by its instance's GPUs."""
    if model not in SERVING:
        raise RocelabError(f"--model: unknown {model!r}; allowed: {', '.join(MODELS)}")
    params, gpus = SERVING[model]
    return params * WEIGHT_BYTES / (gpus * HBM_BPS * HBM_EFFICIENCY)


def default_budget_s(model: str) -> float:
    """The handoff budget when none is given: one decode step (the per-token latency a
    handoff must not exceed), rounded up to whole milliseconds."""
    return math.ceil(decode_step_s(model) * 1000) / 1000
