"""A queue pair whose sending is paced by DCQCN, as a RoCE NIC's rate limiter does.

The RC state machine stays untouched: this subclass gates `poll` with a
token bucket refilled at the reaction point's current rate (capped by the
QP's own rate limit, if set: what ibv_modify_qp_rate_limit does), feeds CNPs to
the reaction point, and tells the loop when tokens will next be available.
The notification point (CNP on CE, at most one per interval) is the base
QueuePair's, with the interval from the profile.
"""

from __future__ import annotations

from ..roce.dcqcn import ReactionPoint
from ..roce.fastpath import Segment
from ..roce.headers import Opcode
from ..roce.memory import MemoryTable
from ..roce.rc import QueuePair
from ..roce.verbs import QpConfig

_CNP = int(Opcode.CNP)


class PacedQueuePair(QueuePair):
    def __init__(self, config: QpConfig, memory: MemoryTable, rp: ReactionPoint | None,
                 limit_bps: float = 0.0):
        super().__init__(config, memory)
        self.rp = rp
        self.limit = float(limit_bps)  # 0: no QP rate limit
        self.burst = 4 * config.mtu  # bytes a quiet QP may send back to back
        self._tokens = float(self.burst)
        self._last: float | None = None

    def set_reaction_point(self, rp: ReactionPoint | None) -> None:
        self.rp = rp

    def receive(self, seg: Segment, now: float) -> None:
        if self.rp is not None and seg.opcode == _CNP:
            self.rp.on_cnp(now)
        super().receive(seg, now)

    @property
    def rate(self) -> float:
        """The pacing rate now: DCQCN's, capped by the QP's rate limit."""
        rate = self.rp.rate if self.rp is not None else self.limit
        return min(rate, self.limit) if self.limit else rate

    def poll(self, now: float, budget: int = 64, runs: bool = False) -> list[Segment]:
        rp = self.rp
        if rp is None and not self.limit:
            return super().poll(now, budget, runs)
        if rp is not None:
            rp.tick(now)
        if self._last is not None:
            self._tokens = min(self.burst, self._tokens + self.rate / 8 * (now - self._last))
        self._last = now
        if self._tokens < 0:
            return []
        allowed = max(1, int(self._tokens // self.config.mtu))
        out = super().poll(now, min(budget, allowed), runs)
        sent = sum(len(s.payload) for s in out)
        self._tokens -= sent
        if rp is not None:
            rp.on_sent(sent)
        return out

    def next_deadline(self) -> float | None:
        base = super().next_deadline()
        if (self.rp is None and not self.limit) or self._tokens >= 0 or self.idle or self._last is None:
            return base
        ready = self._last + -self._tokens * 8 / max(self.rate, 1.0)
        return ready if base is None else min(base, ready)

    @property
    def dcqcn_state(self) -> dict[str, float] | None:
        if self.rp is None:
            return None
        return {"rate_bps": self.rp.rate, "target_bps": self.rp.rt, "alpha": self.rp.alpha,
                "reductions": self.rp.reductions, "lowest_bps": self.rp.lowest,
                "line_bps": self.rp.line, "min_rate_bps": self.rp.p.min_rate}
