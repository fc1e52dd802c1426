"""NSCC, UET 1.0's sender-side congestion control, one window per connection.

As `uec.cpp` of ultraethernet/uet-htsim codes it, reduced to its four actions.
Each acknowledgement brings (ECN marked?, queueing delay = RTT - base RTT);
against the target delay:

| | delay < target | delay >= target |
| --- | --- | --- |
| not marked | proportional increase (+ fair increase) | fair increase |
| marked | hold (and switch path) | multiplicative decrease |

Queueing delay is measured against the lowest RTT seen so far (the configured
base RTT until a first sample): a configured value above the lab's real unloaded
RTT would hide every queue. Multiplicative decrease happens at most once per RTT
(the latest sample, at least the base RTT) and never cuts the window by more
than half. A NACK (a trim, a loss) triggers quick adapt: the
window falls to what was acknowledged during the last base RTT. Every time
constant is wall seconds, already multiplied by the lab's dilation.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Action(str, Enum):
    PROPORTIONAL = "proportional_increase"
    FAIR = "fair_increase"
    HOLD = "hold"
    DECREASE = "multiplicative_decrease"


@dataclass
class NsccParams:
    mtu: int
    base_rtt_s: float  # the fabric's unloaded RTT (wall)
    target_s: float  # the queueing delay NSCC aims at (wall)
    max_cwnd: int  # bytes
    init_cwnd: int  # bytes
    alpha: float = 1.0  # proportional increase: acked bytes x (target - delay) / target x alpha
    fi: float = 1.0  # fair increase: fi MTUs per window's worth of acknowledged bytes
    gamma: float = 0.8  # multiplicative decrease: 1 - gamma x (delay - target) / delay


class Nscc:
    def __init__(self, params: NsccParams, now: float = 0.0):
        self.p = params
        self.cwnd = float(max(params.mtu, min(params.init_cwnd, params.max_cwnd)))
        self.last_decrease = self.last_adapt = now - params.base_rtt_s
        self.acked_window_start, self.acked_in_window = now, 0
        self.acked_last_rtt = 0
        self.counts = {a.value: 0 for a in Action} | {"quick_adapt": 0}
        self.min_rtt: float | None = None  # the lowest RTT sampled: the measured base
        self.last_rtt = params.base_rtt_s

    @property
    def window(self) -> int:
        return int(self.cwnd)

    def on_ack(self, now: float, acked: int, rtt_s: float | None, marked: bool) -> Action:
        """One acknowledgement of `acked` bytes whose packet took `rtt_s` (None: unknown)."""
        self._track(now, acked)
        p = self.p
        if rtt_s is not None:
            self.min_rtt = rtt_s if self.min_rtt is None else min(self.min_rtt, rtt_s)
            self.last_rtt = rtt_s
        base = self.min_rtt if self.min_rtt is not None else p.base_rtt_s
        delay = max(0.0, (rtt_s if rtt_s is not None else base) - base)
        low = delay < p.target_s
        if not marked and low:
            action = Action.PROPORTIONAL
            self.cwnd += p.alpha * acked * (p.target_s - delay) / p.target_s
            self.cwnd += p.fi * p.mtu * acked / self.cwnd
        elif not marked:
            action = Action.FAIR
            self.cwnd += p.fi * p.mtu * acked / self.cwnd
        elif low:
            action = Action.HOLD
        else:
            action = Action.DECREASE
            if now - self.last_decrease < max(p.base_rtt_s, self.last_rtt):
                action = Action.HOLD
            else:
                factor = max(0.5, 1.0 - p.gamma * (delay - p.target_s) / max(delay, 1e-12))
                self.cwnd *= factor
                self.last_decrease = now
        self.cwnd = min(max(self.cwnd, p.mtu), p.max_cwnd)
        self.counts[action.value] += 1
        return action

    def on_nack(self, now: float) -> bool:
        """Quick adapt (at most once per base RTT): the window becomes what the last base
        RTT acknowledged, never less than one MTU. True if it acted."""
        if now - self.last_adapt < self.p.base_rtt_s:
            return False
        self._track(now, 0)
        achieved = max(self.acked_last_rtt, self.acked_in_window)
        self.cwnd = float(min(self.cwnd, max(self.p.mtu, achieved)))
        self.last_adapt = now
        self.counts["quick_adapt"] += 1
        return True

    def _track(self, now: float, acked: int) -> None:
        if now - self.acked_window_start >= self.p.base_rtt_s:
            self.acked_last_rtt, self.acked_in_window = self.acked_in_window, 0
            self.acked_window_start = now
        self.acked_in_window += acked
