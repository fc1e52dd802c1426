"""Resolve a topology's `congestion:` section into numbers (pure, part of the plan).

Time dilation: a link declared at `speed` is shaped at speed / D, and every
protocol timer is multiplied by D, while buffers and thresholds stay in
bytes. Bandwidth x time = bytes is invariant, so queues fill and drain
exactly as they would at full speed, only D times slower. Every duration
is reported both as measured (wall) and real-equivalent (wall / D).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import RocelabError, SpecError
from ..roce.dcqcn import parse_overrides
from ..spec import Topology
from ..units import parse_size, parse_speed

ROCE_TC = 3  # lossless, PFC
CNP_TC = 6  # served first
DEFAULT_TC = 0  # lossy
TCS = (DEFAULT_TC, ROCE_TC, CNP_TC)


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

    def rate_of(self, speed_bps: int) -> int:
        """The shaped rate of a port declared at `speed_bps` (0: the fastest link's)."""
        return int(speed_bps / self.dilation) if speed_bps else self.rate_bps

    def dscp_tc(self) -> dict[int, int]:
        return {self.roce_dscp: ROCE_TC, self.cnp_dscp: CNP_TC}

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
    return CongestionPlan(
        dilation=dilation, speed_bps=speed, rate_bps=int(speed / dilation),
        buffer_bytes=sizes["buffer"], roce_dscp=c.roce_dscp, cnp_dscp=c.cnp_dscp,
        kmin=sizes["kmin"], kmax=sizes["kmax"], pmax=c.ecn.pmax, ecn_tcs=tuple(c.ecn.tcs),
        ecn_off=tuple(c.ecn.disabled_on), ecn_enabled=c.ecn.enabled, xoff=sizes["xoff"],
        xon=sizes["xon"], pfc_enabled=c.pfc.enabled, pfc_off=tuple(c.pfc.disabled_on),
        dcqcn_profile=c.dcqcn.profile, dcqcn_off=tuple(c.dcqcn.disabled_hosts),
        dcqcn_overrides=tuple(overrides.items()), lossless_buffer_bytes=sizes["lossless_buffer"])


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
