"""An MRC connection's pacing: a token bucket, as RC's paced queue pairs are limited."""

from __future__ import annotations


class Pacer:
    """A token bucket limiting the connection to `rate_bps` (0: unlimited), as RC's
    paced queue pairs are limited (a NIC's per-QP rate limit)."""

    def __init__(self, rate_bps: float, burst: int):
        self.rate, self.burst = float(rate_bps), burst
        self.tokens, self.last = float(burst), None  # type: float, float | None

    def allowed(self, now: float, budget: int, mtu: int) -> int:
        """How many of `budget` MTU packets may go now."""
        if not self.rate:
            return budget
        if self.last is not None:
            self.tokens = min(self.burst, self.tokens + self.rate / 8 * (now - self.last))
        self.last = now
        return 0 if self.tokens < 0 else min(budget, max(1, int(self.tokens // mtu)))

    def spent(self, n: int) -> None:
        if self.rate:
            self.tokens -= n

    def ready(self) -> float | None:
        """When the bucket is out of debt (None: it is not in debt)."""
        if not self.rate or self.tokens >= 0 or self.last is None:
            return None
        return self.last - self.tokens * 8 / self.rate
