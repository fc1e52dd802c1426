"""The experiment file (experiments/*.yaml), validated at the boundary like topologies."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ..engine.kv import DTYPE_BYTES, MODELS
from ..errors import SpecError
from ..spec import Strict, load_model, located, read_yaml
from ..units import parse_duration, parse_size, speed_or_zero
from .action_spec import Action, Duration, OnceSent
from .expect_lines import parse as parse_expect

FABRIC_LABEL = re.compile(r"^[a-z][a-z0-9]{0,7}$")  # short lowercase words: l2, l3, evpn
TRANSPORTS = ("rc", "mrc")
MAX_EVS = 1024


class Kv(Strict):
    model: str = "llama3-8b"
    tokens: Annotated[int, Field(ge=1, le=10_000_000)] = 256
    dtype: str = "fp16"
    tokens_per_block: Annotated[int, Field(ge=1, le=1_000_000)] = 16

    @field_validator("model", "dtype")
    @classmethod
    def _known(cls, v: str, info: ValidationInfo) -> str:
        known = MODELS if info.field_name == "model" else DTYPE_BYTES
        if v not in known:
            raise ValueError(f"unknown {info.field_name} {v!r}; allowed: {', '.join(known)}")
        return v


class Flow(Strict):
    name: str
    src: str
    dst: str
    at: Duration = 0.0
    op: Literal["write", "read"] = "write"
    size: str | None = None
    kv: Kv | None = None
    qps: Annotated[int, Field(ge=1, le=64)] = 1
    via: str | None = None  # pin every QP of the flow to this spine (UDP source port choice)
    rate: str | None = Field(None, description="rate limit of the flow, real-equivalent "
                             "(e.g. 100G): its QPs' NIC rate limiters, split evenly")
    ack_timeout: Duration | None = Field(
        None, description="The QPs' first retransmission timeout (wall; an RC NIC's local "
        "ACK timeout): it doubles per retry up to 16x, and a QP fails after 7 timeouts in a "
        "row without progress, so it bounds the outage a transfer survives (engine default: "
        "~9 s in all; 1s: ~2 minutes); raise it to ride out an STP reconvergence")
    repeat: Annotated[int, Field(ge=1, le=10000)] = Field(
        1, description="Transfers back to back (each on new QPs, like KV handoffs); "
        "results give each one's start and duration")
    transport: Literal["rc", "mrc"] | None = Field(
        None, description="rc (RoCEv2 RC QPs, one path each: the default) or mrc (one MRC "
        "connection spraying its EVs); unset in a compare experiment: its fabric's `transport`")
    evs: Annotated[int, Field(ge=1, le=MAX_EVS)] | None = Field(
        None, description="MRC only: the connection's entropy values (engine default 64)")
    may_fail: bool = Field(
        False, description="The request may fail (a comparison showing one transport "
        "losing it): results record failed: true and `expect:` lines check it; the run's "
        "exit code does not count it")
    unloaded: str | None = Field(
        None, description="Another flow of this experiment, the same transfer without the "
        "load: results give this flow's slowdown (its FCT over that flow's)")
    once_sent: OnceSent | None = Field(
        None, description="{flow: bulk, bytes: 1MiB}: not before `at`, and not before that "
        "other flow has sent this much, so the flow meets the traffic it is meant to meet "
        "however long that one's set-up takes (at the experiment's end at the latest)")

    @model_validator(mode="after")
    def _one_size(self) -> Flow:
        if (self.size is None) == (self.kv is None):
            raise ValueError("give exactly one of size or kv")
        if self.size is not None:
            parse_size(self.size, "size")
        if self.transport is not None:
            mrc_problem(self, self.transport, "transport")
        return self

    @field_validator("at")
    @classmethod
    def _at(cls, v: str | float) -> str | float:
        parse_duration(v, None)  # its own error, before `flows` compares it with `duration`
        return v

    @field_validator("ack_timeout")
    @classmethod
    def _ack_timeout(cls, v: str | float | None) -> str | float | None:
        if v is not None:
            parse_duration(v, None, positive=True)
        return v

    @field_validator("rate")
    @classmethod
    def _rate(cls, v: str | None) -> str | None:
        if v is not None and not speed_or_zero(v):
            raise ValueError(f"{v!r} is not a positive speed like 100G or 25G")
        return v


class Replay(Strict):
    """A request trace replayed during the run (docs/workloads.md): `rocelab replay`'s options."""

    trace: str = Field(description="Trace file (Mooncake JSONL, or rocelab's CSV/JSONL), "
                       "relative to the experiment file.")
    at: Duration = Field(0.0, description="When the replay starts on the timeline (wall).")
    model: str = "llama3-70b"
    start: Duration = Field(0.0, alias="from", description="Start of the trace window (trace time).")
    length: Duration | None = Field(None, alias="for", description="Window length (trace time); "
                                    "default: to the end.")
    placement: Literal["round-robin", "least-loaded", "prefix-affinity"] = "round-robin"
    op: Literal["write", "read"] = "read"
    descriptor: str | None = Field(None, description="Largest RDMA op, e.g. 16KiB (NIXL descriptors).")
    stripe: bool = Field(False, description="64 KiB slices over the NICs, 2 QPs per NIC (Mooncake).")
    prefix_cache: str | None = Field(None, description="Each decode host's prefix cache, e.g. 20GiB.")
    budget: Duration | None = Field(None, description="Handoff budget, real-equivalent "
                                    "(default: the model's decode step).")
    time_scale: Annotated[float, Field(gt=0, le=1e6, strict=False)] = Field(
        1.0, description="Wall seconds per trace second.")
    inflight: Annotated[int, Field(ge=1, le=1024)] = 128

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        if v not in MODELS:
            raise ValueError(f"unknown model {v!r}; allowed: {', '.join(MODELS)}")
        return v

    @field_validator("prefix_cache", "descriptor")
    @classmethod
    def _size(cls, v: str | None) -> str | None:
        if v is not None:
            parse_size(v, None)
        return v

    @field_validator("at", "start", "length", "budget")
    @classmethod
    def _durations(cls, v: str | float | None, info: ValidationInfo) -> str | float | None:
        if v is not None:
            parse_duration(v, None, positive=info.field_name in ("length", "budget"))
        return v


def mrc_problem(flow: Flow, transport: str, field: str) -> None:
    """ValueError when `flow` cannot run on `transport` (MRC carries RDMA WRITE only)."""
    if transport == "mrc" and flow.op != "write":
        raise ValueError(f"{field}: mrc carries RDMA WRITE only (op: {flow.op}); "
                         "use op: write or transport: rc")
    if transport == "rc" and flow.evs is not None:
        raise ValueError("evs: only for transport: mrc (this flow runs rc)")


class FabricEntry(Strict):
    """One fabric of a compare experiment given as a mapping: its topology and the
    transport its flows run on unless they name their own."""

    topology: str = Field(description="Topology file, relative to the experiment file.")
    transport: Literal["rc", "mrc"] = Field(
        "rc", description="The flows' transport on this fabric (a flow's own `transport` wins)")


class Experiment(Strict):
    name: str
    description: str = ""
    fabrics: dict[str, str | FabricEntry] | None = Field(
        None, description="Instead of `topology`: label -> topology file (relative to the "
        "experiment file), e.g. {l3: ../topologies/clos-2x4.yaml, l2: ...}, or -> {topology: "
        "FILE, transport: rc|mrc}. `run` runs the same flows and actions on each fabric in "
        "turn and compares them.")
    topology: str | None = Field(
        None, validate_default=True,
        description="Topology file, relative to the experiment file (or `fabrics`).")
    lab: str | None = Field(None, description="Lab name (default: the topology's name); with "
                            "`fabrics`, a prefix: each fabric's lab is LAB-LABEL.")
    duration: Duration = Field(60.0, description="Longest the run may take (wall time).")
    sample_every: Duration = Field(0.1, description="Counter sampling interval.")
    steady_after: Duration = Field(0.0, description="Steady state starts this long after the first flow.")
    flows: Annotated[list[Flow], Field(min_length=1, description="At least one flow.")]
    actions: list[Action] = Field(default_factory=list)
    replay: Replay | None = Field(None, description="A request trace replayed as KV handoffs "
                                  "during the run (docs/workloads.md); results: measured.replay")
    phases: dict[str, list[str]] = Field(
        default_factory=dict, description="Named windows, each from the first start to the last "
        "end of its flows: results give each flow's mean rate and the pause frames in each.")

    @field_validator("fabrics")
    @classmethod
    def _fabrics(cls, v: dict[str, str | FabricEntry] | None
                 ) -> dict[str, str | FabricEntry] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("name at least one fabric: {LABEL: TOPOLOGY-FILE, ...}")
        for label, path in v.items():
            if not FABRIC_LABEL.match(str(label)):
                raise ValueError(f"label {label!r}: 1-8 lowercase letters and digits, starting "
                                 "with a letter (l2, l3, evpn)")
            if not (path.topology if isinstance(path, FabricEntry) else path):
                raise ValueError(f"{label}: a topology file, relative to the experiment file")
        return v

    @model_validator(mode="after")
    def _fabric_transports(self) -> Experiment:
        """Every flow that takes its fabric's transport can run on it."""
        for label, entry in (self.fabrics or {}).items():
            for f in self.flows:
                if isinstance(entry, FabricEntry) and f.transport is None:
                    try:
                        mrc_problem(f, entry.transport, f"fabrics.{label}.transport")
                    except ValueError as e:
                        raise ValueError(f"flows.{f.name}: {e}") from None
        return self

    def transport_on(self, label: str) -> str:
        """The transport flows without their own run on fabric `label` ("": no fabrics)."""
        entry = (self.fabrics or {}).get(label)
        return entry.transport if isinstance(entry, FabricEntry) else "rc"

    def on_fabric(self, label: str) -> Experiment:
        """This experiment as fabric `label` runs it: every flow with its transport set."""
        t = self.transport_on(label)
        flows = [f if f.transport else f.model_copy(update={"transport": t}) for f in self.flows]
        return self.model_copy(update={"flows": flows})

    @field_validator("topology")
    @classmethod
    def _one_fabric_source(cls, v: str | None, info: ValidationInfo) -> str | None:
        fabrics = info.data.get("fabrics")
        if v is not None and fabrics is not None:
            raise ValueError("give topology (one fabric) or fabrics (several, compared), not both")
        if v is None and fabrics is None and "fabrics" in info.data:
            raise ValueError("is required (or fabrics: {LABEL: TOPOLOGY-FILE, ...} to compare)")
        return v

    @field_validator("actions")
    @classmethod
    def _once_sent_flows(cls, v: list[Action], info: ValidationInfo) -> list[Action]:
        names = [f.name for f in info.data.get("flows", [])]
        for a in v:
            if a.once_sent is not None and a.once_sent.flow not in names:
                raise ValueError(f"once_sent: no flow {a.once_sent.flow!r}; flows: "
                                 f"{', '.join(names)}")
        return v

    @field_validator("phases")
    @classmethod
    def _phase_flows(cls, v: dict[str, list[str]], info: ValidationInfo) -> dict[str, list[str]]:
        names = [f.name for f in info.data.get("flows", [])]
        for phase, members in v.items():
            unknown = [m for m in members if m not in names]
            if unknown:
                raise ValueError(f"phase {phase!r}: no flow {unknown[0]!r}; flows: {', '.join(names)}")
            if not members:
                raise ValueError(f"phase {phase!r}: name at least one flow")
        return v

    expect: list[str] = Field(
        default_factory=list, description="Lines that must hold of results.json for `run` to "
        "succeed, e.g. `lossless_drops == 0`, `steady.jain >= 0.9`, `flows.*.integrity_ok`, "
        "`flows.victim.handoff_p99_s < 2` (see docs/cli.md).")

    @field_validator("expect")
    @classmethod
    def _expect(cls, v: list[str], info: ValidationInfo) -> list[str]:
        fabrics = info.data.get("fabrics")
        for line in v:
            e = parse_expect(line)
            for path in (e.path, e.ref or ()):
                if path[:1] != ("fabrics",):
                    continue
                if not fabrics:
                    raise ValueError(f"{line!r}: a fabrics.LABEL path needs `fabrics:` "
                                     "(a compare experiment)")
                if len(path) < 2 or (path[1] != "*" and path[1] not in fabrics):
                    raise ValueError(f"{line!r}: no fabric {path[1] if len(path) > 1 else ''!r}; "
                                     f"fabrics: {', '.join(fabrics)}")
        return v

    @field_validator("flows")
    @classmethod
    def _flows_start_in_time(cls, v: list[Flow], info: ValidationInfo) -> list[Flow]:
        try:
            end = parse_duration(info.data.get("duration", 60.0), None)
        except (ValueError, TypeError):
            return v  # the duration's own error is reported
        for f in v:
            if parse_duration(f.at, None) >= end:
                raise ValueError(f"flow {f.name!r} starts at {f.at}, not before the experiment's "
                                 f"duration ({info.data.get('duration')}): it could never run")
        return v

    @field_validator("flows")
    @classmethod
    def _unloaded(cls, v: list[Flow]) -> list[Flow]:
        names = [f.name for f in v]
        for f in v:
            if f.unloaded is not None and (f.unloaded == f.name or f.unloaded not in names):
                raise ValueError(f"flow {f.name!r}: unloaded: {f.unloaded!r} is not another "
                                 f"flow; flows: {', '.join(names)}")
        return v

    @field_validator("flows")
    @classmethod
    def _flows_once_sent(cls, v: list[Flow]) -> list[Flow]:
        names = [f.name for f in v]
        for f in v:
            held = f.once_sent.flow if f.once_sent is not None else None
            if held is not None and (held == f.name or held not in names):
                raise ValueError(f"flow {f.name!r}: once_sent: {held!r} is not another flow; "
                                 f"flows: {', '.join(names)}")
        return v

    @field_validator("duration", "sample_every", "steady_after")
    @classmethod
    def _duration(cls, v: str | float) -> str | float:
        parse_duration(v, None)
        return v


def load(path: str | Path) -> tuple[Experiment, Path]:
    """A one-topology experiment and its resolved topology path (`load_fabrics` takes both kinds)."""
    exp, topologies = load_fabrics(path)
    if exp.fabrics is not None:
        raise located(SpecError(str(path), "fabrics", "a compare experiment: run it with "
                                "`rocelab run` (runner.run_compare), not as one topology"),
                      read_yaml(path)[1])
    return exp, topologies[""]


def load_fabrics(path: str | Path) -> tuple[Experiment, dict[str, Path]]:
    """The experiment and each fabric's resolved topology path, by label, in the file's
    order; a `topology:` experiment has one, labelled "" (empty)."""
    exp = load_model(path, Experiment, "name, topology or fabrics, flows")
    wanted = exp.fabrics if exp.fabrics is not None else {"": exp.topology or ""}
    out = {}
    for label, entry in wanted.items():
        rel = entry.topology if isinstance(entry, FabricEntry) else entry
        topo = (Path(path).parent / rel).resolve()
        if not topo.exists():
            field = f"fabrics.{label}" if label else "topology"
            raise located(SpecError(str(path), field, f"no such file {topo}"), read_yaml(path)[1])
        out[label] = topo
    if exp.replay is not None:  # the trace is read (every line checked) before anything runs
        trace = (Path(path).parent / exp.replay.trace).resolve()
        exp = exp.model_copy(update={"replay": exp.replay.model_copy(update={"trace": str(trace)})})
    return exp, out
