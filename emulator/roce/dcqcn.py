"""DCQCN (Zhu et al., SIGCOMM 2015): the reaction point's rate limiter, sans-IO.

One `ReactionPoint` per sending QP. Time is passed in (seconds), so the math
is unit-tested against hand-computed sequences and time dilation is just a
matter of stretching the profile's timers and shrinking its rates by D.

  CNP          Rt = Rc when the profile clamps (see below); Rc = Rc (1 - alpha/2);
               alpha = (1 - g) alpha + g
               (at most once per rate-reduce period); increase stages reset
  alpha timer  every K without a CNP: alpha = (1 - g) alpha
  increase     every Ti (timer) or B bytes sent (byte counter), one stage:
                 max(iT, iB) < F   fast recovery   Rc = (Rt + Rc) / 2
                 min(iT, iB) > F   hyper increase  Rt += i * R_HAI, i = min - F
                 otherwise         additive        Rt += R_AI
               then Rc = (Rt + Rc) / 2, both capped at line rate
  floor        Rc >= min rate
  clamp        the paper clamps Rt on every cut. NVIDIA NICs (clamp_tgt_rate 0,
               clamp_tgt_rate_after_time_inc 1) clamp only when the rate rose
               since the last cut (a byte-counter stage always counts, a timer
               stage with after_time_inc): a burst of CNPs keeps the target at
               the rate before the burst, so fast recovery climbs back there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Profile:
    """Rates in bit/s, times in seconds, at the real (undilated) link speed."""

    name: str
    g: float  # EWMA gain of alpha
    alpha_period: float  # K
    alpha_init: float
    reduce_period: float  # minimum time between two rate reductions
    increase_timer: float  # Ti
    byte_counter: int  # B
    rate_ai: float
    rate_hai: float
    f: int  # stages of fast recovery
    min_rate: float
    cnp_interval: float  # notification point: at most one CNP per QP per interval
    clamp_target: bool = True  # on every cut Rt = Rc (the paper; mlx5 clamp_tgt_rate)
    clamp_after_increase: bool = False  # clamp after a timer stage (clamp_tgt_rate_after_time_inc)

    def dilated(self, d: float) -> Profile:
        """Timers x D, rates / D (bytes stay bytes): the same dynamics on a slower link."""
        return replace(self, alpha_period=self.alpha_period * d, reduce_period=self.reduce_period * d,
                       increase_timer=self.increase_timer * d, cnp_interval=self.cnp_interval * d,
                       rate_ai=self.rate_ai / d, rate_hai=self.rate_hai / d,
                       min_rate=self.min_rate / d)


PROFILES = {
    # NVIDIA ConnectX defaults (mlx5 DCQCN parameters): g = 1 - 1019/1024,
    # rpg_byte_reset 32767 (in 64-byte units: ~2 MB between byte-counter
    # stages), rpg_gd 11 with alpha in 1/1024 units (a cut of alpha/2),
    # clamp_tgt_rate 0 and clamp_tgt_rate_after_time_inc 1 (the target rate
    # survives a burst of cuts, and is clamped once the rate has risen).
    "nvidia": Profile("nvidia", g=5 / 1024, alpha_period=1e-6, alpha_init=1023 / 1024,
                      reduce_period=4e-6, increase_timer=300e-6, byte_counter=32767 * 64,
                      rate_ai=5e6, rate_hai=50e6, f=1, min_rate=1e6, cnp_interval=4e-6,
                      clamp_target=False, clamp_after_increase=True),
    # The DCQCN paper's simulation values.
    "paper": Profile("paper", g=1 / 256, alpha_period=55e-6, alpha_init=1.0,
                     reduce_period=50e-6, increase_timer=55e-6, byte_counter=10 * 1024 * 1024,
                     rate_ai=40e6, rate_hai=200e6, f=5, min_rate=1e6, cnp_interval=50e-6),
}
CHOICES = (*PROFILES, "off")  # what a host's DCQCN can be set to


class ReactionPoint:
    """Rate limiter state of one QP. Call `tick(now)` before asking for `rate`."""

    def __init__(self, profile: Profile, line_rate: float, now: float = 0.0):
        self.p, self.line = profile, float(line_rate)
        self.rc = self.rt = self.line
        self.alpha = profile.alpha_init
        self.t_stage = self.b_stage = 0
        self.bytes = 0
        self.cnps = 0
        self.reductions = 0
        self.lowest = self.line  # the lowest rate a cut reached (diagnose: a min rate too high)
        self._last_cnp = self._last_reduce = float("-inf")
        self._next_alpha = now + profile.alpha_period
        self._next_increase = now + profile.increase_timer

    @property
    def rate(self) -> float:
        return self.rc

    def on_cnp(self, now: float) -> None:
        self.cnps += 1
        self._last_cnp = now
        if now - self._last_reduce < self.p.reduce_period:
            return
        self._last_reduce = now
        self.reductions += 1
        if self.p.clamp_target or self.b_stage or (self.p.clamp_after_increase and self.t_stage):
            self.rt = self.rc
        self.rc = max(self.p.min_rate, self.rc * (1 - self.alpha / 2))
        self.lowest = min(self.lowest, self.rc)
        self.alpha = (1 - self.p.g) * self.alpha + self.p.g
        self.t_stage = self.b_stage = 0
        self.bytes = 0
        self._next_increase = now + self.p.increase_timer
        self._next_alpha = now + self.p.alpha_period

    def on_sent(self, nbytes: int) -> None:
        self.bytes += nbytes
        while self.bytes >= self.p.byte_counter:
            self.bytes -= self.p.byte_counter
            self.b_stage += 1
            self._increase()

    def tick(self, now: float) -> None:
        """Run the alpha and increase timers up to `now`."""
        while self._next_alpha <= now:
            if self._last_cnp < self._next_alpha - self.p.alpha_period:
                self.alpha = (1 - self.p.g) * self.alpha
            self._next_alpha += self.p.alpha_period
            if self.alpha < 1e-9:  # decayed to nothing: stop iterating tiny periods
                self._next_alpha = max(self._next_alpha, now)
        while self._next_increase <= now:
            self._next_increase += self.p.increase_timer
            self.t_stage += 1
            self._increase()

    def _increase(self) -> None:
        low, high = min(self.t_stage, self.b_stage), max(self.t_stage, self.b_stage)
        if high < self.p.f:
            pass  # fast recovery: only Rc moves toward Rt
        elif low > self.p.f:
            self.rt += (low - self.p.f) * self.p.rate_hai
        else:
            self.rt += self.p.rate_ai
        self.rt = min(self.rt, self.line)
        self.rc = min(self.line, (self.rt + self.rc) / 2)


class NotificationPoint:
    """Receiver side: answer CE-marked packets with at most one CNP per interval per QP."""

    def __init__(self, interval: float):
        self.interval = interval
        self._last = float("-inf")
        self.pending = False

    def on_ce(self, now: float) -> bool:
        """True when a CNP should be sent now."""
        if now - self._last >= self.interval:
            self._last = now
            return True
        return False
