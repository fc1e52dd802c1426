"""The `actions:` entries of an experiment file: what each action kind takes, validated at
the boundary (experiment/actions.py performs them)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ..roce.dcqcn import CHOICES
from ..spec import Strict
from ..units import parse_size

Duration = Annotated[str | float, Field(description="A duration: 500ms, 2s, 1m or seconds.")]


# Action kind -> (whom it acts on, its setting, the setting's default)
ACTION_ARGS = {"ecn": ("node", "enabled", False), "drain": ("host", "enabled", True),
               "dcqcn": ("host", "profile", "off")}


class Stp(Strict):
    enabled: bool = Field(False, description="false: every bridge's STP off -- on a fabric "
                          "with redundant links, a loop. A watchdog turns it back on at the "
                          "experiment's end even if the run dies.")


class Broadcast(Strict):
    host: str = Field(description="The host that sends the burst.")
    frames: Annotated[int, Field(ge=1, le=100000)] = Field(100, description="ARP requests (broadcast).")
    pps: Annotated[float, Field(gt=0, le=100000, strict=False)] = Field(
        1000, description="Frames per second.")
    size: Annotated[int, Field(ge=60, le=1514)] = Field(
        60, description="Frame size in bytes (an ARP request padded with zeros).")


class Churn(Strict):
    host: str = Field(description="The bystander that sends from made-up MACs until the run ends.")
    macs: Annotated[int, Field(ge=1, le=65536)] = Field(64, description="Distinct source MACs.")
    pps: Annotated[float, Field(gt=0, le=20000, strict=False)] = Field(
        1000, description="Frames per second, round robin over the MACs.")
    flush: bool = Field(True, description="Empty every bridge's MAC table first, so the churn "
                        "fills it before anything else is learned.")


class Vtysh(Strict):
    node: str = Field(description="A router running FRR (not a host, not an l2 switch).")
    commands: list[str] = Field(
        description="vtysh commands run in order in one session, as `rocelab vtysh -c` runs "
        "them (a configuration change starts with `configure terminal`); one string: its lines")

    @field_validator("commands", mode="before")
    @classmethod
    def _commands(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [ln for ln in v.splitlines() if ln.strip()]
        if isinstance(v, list) and (not v or any(isinstance(c, str) and not c.strip() for c in v)):
            raise ValueError("give at least one command, none of them empty")
        return v


ACTION_KINDS = ("ecn", "drain", "dcqcn", "fault", "stp", "broadcast", "churn", "vtysh")


class OnceSent(Strict):
    flow: str = Field(description="A flow of the experiment.")
    bytes: str = Field(description="Bytes it has put on the wire in this run (resends count): "
                       "16MiB, 500MB, 4096.")

    @field_validator("bytes")
    @classmethod
    def _bytes(cls, v: str) -> str:
        parse_size(str(v))
        return v


class Action(Strict):
    at: Duration
    ecn: dict[str, Any] | None = Field(None, description="{node: leaf3, enabled: false}")
    drain: dict[str, Any] | None = Field(None, description="{host: decode1, enabled: false}")
    dcqcn: dict[str, Any] | None = Field(None, description="{host: prefill1, profile: paper|nvidia|off}")
    fault: dict[str, Any] | None = Field(None, description="{fail: link, a: leaf1, b: spine2} (see faults)")
    stp: Stp | None = Field(None, description="{enabled: false}: the storm demo's loop (fabric l2; "
                            "a no-op, recorded, on routed fabrics)")
    broadcast: Broadcast | None = Field(None, description="{host: prefill1, frames: 100, pps: 1000}: "
                                        "a burst of broadcast ARP requests; records the copies "
                                        "its leaf sent upstream")
    churn: Churn | None = Field(None, description="{host: decode4, macs: 64, pps: 1000}: a "
                                "bystander keeping MAC tables full")
    vtysh: Vtysh | None = Field(None, description="{node: spine1, commands: [configure terminal, "
                                "router bgp 65000, bgp graceful-shutdown]}: the router's own FRR")
    once_sent: OnceSent | None = Field(
        None, description="{flow: kv1, bytes: 16MiB}: not before `at`, and not before that flow "
        "has sent this much, so the action lands mid-transfer however long set-up takes (at "
        "the experiment's end at the latest, recorded as `late`)")

    @field_validator("ecn", "drain", "dcqcn")
    @classmethod
    def _args(cls, v: dict[str, Any] | None, info: ValidationInfo) -> dict[str, Any] | None:
        if v is None:
            return v
        who, flag, default = ACTION_ARGS[info.field_name]  # type: ignore[index]
        unknown = set(v) - {who, flag}
        if unknown:
            raise ValueError(f"unknown key {sorted(unknown)[0]!r}; allowed: {who}, {flag}")
        if not isinstance(v.get(who), str):
            raise ValueError(f"{who}: name the {'switch' if who == 'node' else 'host'} it acts on")
        value = v.get(flag, default)
        if flag == "profile":
            value = "off" if value is False else value  # YAML 1.1 reads a bare `off` as false
            if value not in CHOICES:
                raise ValueError(f"profile: must be one of {', '.join(CHOICES)} (got {value!r})")
        elif not isinstance(value, bool):
            raise ValueError(f"{flag}: must be true or false (got {value!r})")
        return {who: v[who], flag: value}

    @model_validator(mode="after")
    def _one_kind(self) -> Action:
        kinds = [k for k in ACTION_KINDS if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(f"give exactly one of {', '.join(ACTION_KINDS)}")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in ACTION_KINDS if getattr(self, k) is not None)

    @property
    def args(self) -> dict[str, Any]:
        """The action's arguments as a plain dict (models dumped)."""
        v = getattr(self, self.kind)
        return v.model_dump() if isinstance(v, Strict) else dict(v)
