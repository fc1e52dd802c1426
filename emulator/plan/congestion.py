"""Resolve a topology's `congestion:` section into numbers (pure, part of the plan).

Time dilation: a link declared at `speed` is shaped at speed / D, and DCQCN's
timers are multiplied by D (its rate steps divided by D), while buffers and
thresholds stay in bytes. BGP, BFD and STP timers are rendered as the topology
gives them, not dilated. Bandwidth x time = bytes is invariant, so queues fill
and drain exactly as they would at full speed, only D times slower. Every
duration is reported both as measured (wall) and real-equivalent (wall / D).

Also the grammar of `dcqcn.overrides` (what a topology may change of a DCQCN
profile, in real-speed units); the profiles themselves are roce/dcqcn.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import RocelabError, SpecError
from ..spec import Topology
from ..units import MAX_SPEED, UnitError, parse_duration, parse_size, parse_speed, speed_or_zero
from . import trimming
from .trimming import MRC_TC, TrimPlan

ROCE_TC = 3  # lossless, PFC
CNP_TC = 6  # served first
DEFAULT_TC = 0  # lossy
TCS = (DEFAULT_TC, MRC_TC, ROCE_TC, CNP_TC)


@dataclass(frozen=True)
class CongestionPlan:
    dilation: float
    speed_bps: int  # declared (real) line rate of the fastest link
    rate_bps: int  # its shaped rate = speed / dilation (each port: rate_of(its speed))
    buffer_bytes: int
    roce_dscp: int
    cnp_dscp: int
    kmin: int
    kmax: int
    pmax: float
    ecn_tcs: tuple[int, ...]
    ecn_off: tuple[str, ...]  # switches with marking disabled
    xoff: int
    xon: int
    pfc_enabled: bool
    pfc_off: tuple[str, ...]
    dcqcn_profile: str
    dcqcn_off: tuple[str, ...]
    ecn_enabled: bool
    dcqcn_overrides: tuple[tuple[str, object], ...] = ()  # profile fields, parsed (real units)
    lossless_buffer_bytes: int = 64 << 20  # the lossless class's per-port limit (pfc.buffer)
    mrc_dscp: int = 18  # MRC data: TC 2, lossy
    trim: TrimPlan | None = None  # packet trimming (None: off)

    def rate_of(self, speed_bps: int) -> int:
        """The shaped rate of a port declared at `speed_bps` (0: the fastest link's)."""
        return int(speed_bps / self.dilation) if speed_bps else self.rate_bps

    def dscp_tc(self) -> dict[int, int]:
        out = {self.roce_dscp: ROCE_TC, self.cnp_dscp: CNP_TC, self.mrc_dscp: MRC_TC}
        if self.trim:  # a trimmed packet rides the priority class to its destination
            out[self.trim.dscp] = self.trim.tc
        return out

    def ecn_on(self, node: str) -> bool:
        return self.ecn_enabled and node not in self.ecn_off

    def host_dcqcn(self, host: str) -> str:
        """The DCQCN profile a host's engine runs as declared ("off" included)."""
        return "off" if host in self.dcqcn_off else self.dcqcn_profile

    def pfc_on(self, node: str) -> bool:
        return self.pfc_enabled and node not in self.pfc_off


def resolve(topo: Topology, source: str, switches: set[str], hosts: set[str],
            speed: int) -> CongestionPlan | None:
    """`speed`: the fastest link's; dilation auto brings it under max_link_rate, and every
    port is shaped at its own speed / D (`rate_of`)."""
    c = topo.congestion
    if not c.enabled:
        if c.trimming.enabled:
            raise SpecError(source, "congestion.trimming.enabled", "needs congestion.enabled: "
                            "true (trimming runs in the shaped dataplane)")
        return None
    if c.dilation == "auto":
        dilation = float(max(1, math.ceil(speed / parse_speed(c.max_link_rate))))
    else:
        dilation = float(c.dilation)
    try:
        sizes = {k: parse_size(v) for k, v in (("kmin", c.ecn.kmin), ("kmax", c.ecn.kmax),
                                              ("xoff", c.pfc.xoff), ("xon", c.pfc.xon),
                                              ("buffer", c.buffer),
                                              ("lossless_buffer", c.pfc.buffer))}
    except RocelabError as e:
        raise SpecError(source, "congestion", str(e)) from None
    _check(source, sizes, c, switches, hosts)
    if not math.isfinite(dilation) or speed / dilation < MIN_SHAPED_BPS:
        field = "congestion.dilation" if c.dilation != "auto" else "congestion.max_link_rate"
        raise SpecError(source, field, f"would shape links at {speed / dilation:g} bit/s: "
                        f"at least {MIN_SHAPED_BPS // 1000} kbit/s, so dilation at most "
                        f"{speed // MIN_SHAPED_BPS:g} for the fastest link's {speed / 1e9:g}G")
    try:
        overrides = parse_overrides(c.dcqcn.overrides)
    except RocelabError as e:
        key, msg = str(e).split(": ", 1)
        raise SpecError(source, f"congestion.dcqcn.overrides.{key}", msg) from None
    trim = trimming.resolve(source, c, sizes["buffer"])
    return CongestionPlan(
        dilation=dilation, speed_bps=speed, rate_bps=int(speed / dilation),
        buffer_bytes=sizes["buffer"], roce_dscp=c.roce_dscp, cnp_dscp=c.cnp_dscp,
        kmin=sizes["kmin"], kmax=sizes["kmax"], pmax=c.ecn.pmax, ecn_tcs=tuple(c.ecn.tcs),
        ecn_off=tuple(c.ecn.disabled_on), ecn_enabled=c.ecn.enabled, xoff=sizes["xoff"],
        xon=sizes["xon"], pfc_enabled=c.pfc.enabled, pfc_off=tuple(c.pfc.disabled_on),
        dcqcn_profile=c.dcqcn.profile, dcqcn_off=tuple(c.dcqcn.disabled_hosts),
        dcqcn_overrides=tuple(overrides.items()), lossless_buffer_bytes=sizes["lossless_buffer"],
        mrc_dscp=c.mrc_dscp, trim=trim)


MAX_THRESHOLD = 2**32 - 1  # the BPF dataplane keeps thresholds and depths in 32 bits
MIN_SHAPED_BPS = 100_000  # below this a port would pass a jumbo frame less than once a second


def _check(source: str, sizes: dict[str, int], c, switches: set[str], hosts: set[str]) -> None:
    for key, where in (("kmin", "ecn.kmin"), ("kmax", "ecn.kmax"), ("xoff", "pfc.xoff"),
                       ("xon", "pfc.xon"), ("buffer", "buffer"), ("lossless_buffer", "pfc.buffer")):
        if sizes[key] > MAX_THRESHOLD:
            raise SpecError(source, f"congestion.{where}", "must be at most 4GiB - 1 (the "
                            f"dataplane counts bytes in 32 bits; got {sizes[key]})")
    if sizes["kmin"] >= sizes["kmax"]:
        raise SpecError(source, "congestion.ecn.kmin", f"must be below kmax ({c.ecn.kmax})")
    if sizes["xon"] >= sizes["xoff"]:
        raise SpecError(source, "congestion.pfc.xon", f"must be below xoff ({c.pfc.xoff})")
    if c.roce_dscp == c.cnp_dscp:
        raise SpecError(source, "congestion.cnp_dscp", "must differ from roce_dscp")
    for field, names, pool in (("ecn.disabled_on", c.ecn.disabled_on, switches),
                               ("pfc.disabled_on", c.pfc.disabled_on, switches),
                               ("dcqcn.disabled_hosts", c.dcqcn.disabled_hosts, hosts)):
        for name in names:
            if name not in pool:
                raise SpecError(source, f"congestion.{field}",
                                f"no such node {name!r}; allowed: {', '.join(sorted(pool))}")


# -- dcqcn.overrides: profile fields a topology may change ----------------------

MAX_PERIOD_S = 1.0  # DCQCN's timers are microseconds to milliseconds at real speed


def _flag(v: object) -> bool:
    if not isinstance(v, bool):
        raise ValueError("must be true or false")
    return v


def _rate(v: object) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < MAX_SPEED:
        return float(v)  # not inf, not 1e308: the rate is divided and multiplied later
    if isinstance(v, str) and (bps := speed_or_zero(v)):
        return float(bps)
    raise ValueError(f"{v!r} is not a positive rate below 100T like 5M or 40M (bit/s at the real "
                     "link speed)")


def _time(v: object) -> float:
    try:
        seconds = parse_duration(v, None, positive=True)  # type: ignore[arg-type]
    except UnitError:
        seconds = 0.0
    if not 0 < seconds <= MAX_PERIOD_S:  # a period of microseconds; x D stays a finite wait
        raise ValueError(f"{v!r} is not a positive time of at most 1s like 4us, 300us or 1.5ms")
    return seconds


def _bytes(v: object) -> int:
    try:
        return parse_size(v, None)  # type: ignore[arg-type]
    except UnitError:
        raise ValueError(f"{v!r} is not a positive size like 10MiB or 2MB") from None


def _stages(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 100:
        raise ValueError(f"must be a whole number of stages, 1-100 (got {v!r})")
    return v


def _fraction(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise ValueError(f"must be a number in (0, 1] (got {v!r})")
    return float(v)


# What a topology may override, and how each value is written (real-speed units).
OVERRIDES = {"g": _fraction, "alpha_period": _time, "alpha_init": _fraction,
             "reduce_period": _time, "increase_timer": _time, "byte_counter": _bytes,
             "rate_ai": _rate, "rate_hai": _rate, "f": _stages, "min_rate": _rate,
             "cnp_interval": _time, "clamp_target": _flag, "clamp_after_increase": _flag}


def parse_overrides(raw: dict[str, object]) -> dict[str, object]:
    """Profile fields from a topology's `dcqcn.overrides`; RocelabError('key: why') if bad."""
    out: dict[str, object] = {}
    for key, value in raw.items():
        if key not in OVERRIDES:
            raise RocelabError(f"{key}: not a DCQCN parameter; allowed: {', '.join(OVERRIDES)}")
        try:
            out[key] = OVERRIDES[key](value)
        except ValueError as e:
            raise RocelabError(f"{key}: {e}") from None
    return out
