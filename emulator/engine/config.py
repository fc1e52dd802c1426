"""How a lab's engines behave: DSCP, timers and DCQCN, derived from the plan."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..plan import Node, Plan
from ..roce.dcqcn import PROFILES, Profile
from ..units import Dilation, parse_size
from .job import ROCE_DSCP
from .regions import DEFAULT_MAX_REGISTERED, ENV_MAX_REGISTERED

MRC_DSCP = 18  # MRC data on DSCP 18 / TC 2 (lossy, trimmable) by default
# 262 us real-equivalent: ~26 modelled base RTTs (10 us), 1.05 s wall at D = 4000 (RC's
# 1 s wall floor); 2^10 (4.2 s, RC's RTO) cost every packet on a lost plane 4 s of wall
MRC_ACK_EXP_SHAPED = 8
RTO_REAL_S = 1e-3  # first retransmission timeout on congestion labs, real-equivalent


@dataclass(frozen=True)
class EngineConfig:
    dscp: int = ROCE_DSCP
    rto: float = 0.1  # first retransmission timeout, wall seconds
    rto_max: float = 2.0
    window: int = 512  # request packets outstanding per QP (measured: 128 starves a 1-QP path)
    line_rate_bps: float = 0.0  # 0: unshaped lab, no DCQCN
    dilation: float = 1.0
    dcqcn: str | None = None  # profile name, or None for off
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)  # profile -> fields
    max_registered_bytes: int = DEFAULT_MAX_REGISTERED  # memory regions held at once
    mrc_dscp: int = MRC_DSCP  # MRC data's DSCP (the topology's congestion.mrc_dscp)
    mrc_ack_exp: int = 16  # MRC's ACK timeout: 1.024 us x 2^t x dilation (16: 67 ms)

    def profile(self, name: str | None = "") -> Profile | None:
        """The (dilated) DCQCN profile `name` (default: this host's), None if off."""
        name = self.dcqcn if name == "" else name
        if not name or name == "off" or not self.line_rate_bps:
            return None
        return replace(PROFILES[name], **self.overrides.get(name, {})).dilated(self.dilation)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> EngineConfig:
        return cls(**json.loads(text))


def max_registered(environ: dict[str, str] | None = None) -> int:
    """The cap on an engine's registered regions: ROCELAB_ENGINE_MAX_REGISTERED (a size
    such as 16GiB) or the default."""
    text = (os.environ if environ is None else environ).get(ENV_MAX_REGISTERED)
    return DEFAULT_MAX_REGISTERED if text is None else parse_size(text, ENV_MAX_REGISTERED)


def for_host(plan: Plan, host: Node) -> EngineConfig:
    return replace(_for_host(plan, host), max_registered_bytes=max_registered())


def _for_host(plan: Plan, host: Node) -> EngineConfig:
    cp = plan.congestion
    if cp is None:
        return EngineConfig()
    # Queues of a few MB at ~100 Mbit/s and pauses hold packets for seconds of
    # wall time: a short RTO would retransmit what is merely waiting in a
    # paused queue. 1 ms real-equivalent (4 s wall at D = 4000) -- still far
    # shorter than a RoCE NIC's (4.096 us x 2^timeout, e.g. 67 ms), whose
    # dilated value would make a real loss (a failed link) take minutes.
    rto = max(1.0, Dilation(cp.dilation).wall_s(RTO_REAL_S))
    profile = cp.host_dcqcn(host.name)
    # A RoCE NIC does not stop at a small window: its lossless class relies on
    # ECN and PFC, so let each QP keep megabytes in flight (2048 x MTU).
    return EngineConfig(dscp=cp.roce_dscp, rto=rto, rto_max=4 * rto, window=2048,
                        mrc_dscp=int(getattr(cp, "mrc_dscp", MRC_DSCP)),
                        mrc_ack_exp=MRC_ACK_EXP_SHAPED,
                        line_rate_bps=cp.rate_of(host.interfaces[0].speed_bps), dilation=cp.dilation,
                        dcqcn=None if profile == "off" else profile,
                        overrides={cp.dcqcn_profile: dict(cp.dcqcn_overrides)})
