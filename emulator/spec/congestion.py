"""The topology's `congestion:` section as written: shaping and time dilation, ECN,
PFC and DCQCN. plan/congestion.py resolves it into numbers."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from .boundary import Strict
from .fields import Size, Speed

# The fastest shaped rate `dilation: auto` picks by default: the highest at which the 4:1
# incast kept its fidelity on the reference machine (2 vCPU, kernel 6.18, FRR 8.4.4) with
# today's engine: `make bench` (python -m emulator.bench --only dilation) measures it, and
# `rocelab calibrate` finds a machine's own. 2026-11-27: 200M held, 400M did not (91.5 %
# busy, 14 pauses) with other labs at a load average of ~5. 100M before issue 26.
DEFAULT_MAX_LINK_RATE = "200M"


class Ecn(Strict):
    enabled: bool = Field(True, description="RED-style CE marking on switch egress queues.")
    kmin: Size = Field("150KB", description="Queue depth where marking starts (bytes: 150KB, 1MiB).")
    kmax: Size = Field("1500KB", description="Queue depth where marking reaches pmax; every packet above.")
    pmax: Annotated[float, Field(gt=0, le=1, strict=False)] = Field(
        0.2, description="Marking probability at kmax.")
    tcs: list[Annotated[int, Field(ge=0, le=7)]] = Field(
        default_factory=lambda: [3], description="Traffic classes that mark (default: RoCE, TC 3).")
    disabled_on: list[str] = Field(
        default_factory=list, description="Switches with marking off (reproduces 'DCQCN silently off').")


class Pfc(Strict):
    enabled: bool = Field(True, description="PFC-like pause of the lossless TC, hop by hop.")
    xoff: Size = Field("1MB", description="Bytes buffered from one ingress port that pause the "
                       "upstream port.")
    xon: Size = Field("800KB", description="Bytes below which the upstream port resumes.")
    disabled_on: list[str] = Field(default_factory=list, description="Switches that never pause.")
    buffer: Size = Field("64MiB", description="Per-port buffer of the lossless class (TBF limit): "
                        "what overflows it is dropped (PFC off, or XOFF too close to it).")


class Dcqcn(Strict):
    profile: Literal["nvidia", "paper", "off"] = Field(
        "nvidia", description="Rate-control parameters: NIC defaults, the SIGCOMM 2015 values, or off.")
    disabled_hosts: list[str] = Field(default_factory=list, description="Hosts with DCQCN off.")
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="Profile parameters to change, at real link speed: "
        "rate_ai: 10M, increase_timer: 55us, byte_counter: 10MiB, g: 0.004, f: 5, ...")

    @field_validator("profile", mode="before")
    @classmethod
    def _off(cls, v: Any) -> Any:
        return "off" if v is False else v  # YAML 1.1 reads a bare `off` as false


class Trimming(Strict):
    """Packet trimming (UET 1.0, SONiC/Cumulus): a switch port that would queue a packet of a
    trimmable class above `threshold` cuts it to `size` bytes instead, rewrites its DSCP
    and sends it on the priority class, so the receiver learns of the loss at once."""

    enabled: bool = Field(False, description="Trim instead of queueing above the threshold.")
    classes: list[Annotated[int, Field(ge=0, le=7)]] = Field(
        default_factory=lambda: [2], description="Lossy traffic classes that are trimmed "
        "(default: MRC data, TC 2; the lossless RoCE class 3 keeps PFC).")
    threshold: Size | None = Field(
        None, description="Egress queue depth of the class above which a packet is trimmed "
        "(default: half the lossy buffer).")
    size: Annotated[int, Field(ge=64, le=1500)] = Field(
        128, description="Frame bytes a trimmed packet keeps (64-1500; MRC's headers are 86).")
    dscp: Annotated[int, Field(ge=0, le=63)] = Field(11, description="DSCP of trimmed packets.")
    priority_tc: Annotated[int, Field(ge=0, le=7)] = Field(
        6, description="Traffic class trimmed packets are sent on (6: served first).")


class Congestion(Strict):
    enabled: bool = Field(False, description="Shape every port and run ECN, PFC and DCQCN.")
    dilation: Annotated[float, Field(ge=1, strict=False)] | Literal["auto"] = Field(
        "auto", description="Time dilation D (at least 1: a lab never runs faster than the "
        "fabric it emulates): links run at speed/D, DCQCN's timers x D (BGP, BFD and STP "
        "timers as given).")
    max_link_rate: Speed = Field(DEFAULT_MAX_LINK_RATE,
                                 description="With dilation auto: pick D so speed/D <= this.")
    buffer: Size = Field("4MB", description="Per-port buffer of each lossy class (bfifo limit).")
    roce_dscp: Annotated[int, Field(ge=0, le=63)] = Field(26, description="DSCP of RoCE data.")
    cnp_dscp: Annotated[int, Field(ge=0, le=63)] = Field(48, description="DSCP of CNPs.")
    mrc_dscp: Annotated[int, Field(ge=0, le=63)] = Field(
        18, description="DSCP of MRC data (TC 2, lossy: trimmable).")
    ecn: Ecn = Field(default_factory=Ecn, description="Switch ECN marking.")
    pfc: Pfc = Field(default_factory=Pfc, description="Lossless class pauses.")
    dcqcn: Dcqcn = Field(default_factory=Dcqcn, description="Sender rate control.")
    trimming: Trimming = Field(default_factory=Trimming, description="Switch packet trimming.")

