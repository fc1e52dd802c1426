"""The topology file, validated at the boundary.

Everything a user may write is declared here with pydantic (`extra="forbid"`,
strict types), so a typo is an error naming the field, never a silent default.
`load()` turns any problem into one `SpecError` line; nothing downstream ever
sees an unvalidated value.
"""

from __future__ import annotations

import ipaddress
import json
import re
import typing
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from . import boundedread
from .errors import SpecError
from .names import LAB_NAME, LAB_RULE, MAX_LAB_NAME, NODE_NAME, is_lab_name  # noqa: F401 -- re-exported
from .units import SPEED_RE, UnitError, parse_size, parse_speed

THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
MAX_SHOWN = 64  # characters of a bad value an error line repeats
MAX_FILE_BYTES = 1 << 20  # a topology or experiment file: 1 MiB of text is far beyond any real one
MAX_DEPTH = 32  # mappings and lists inside each other
MAX_ALIASES = 16  # *alias references: enough to share a flow template, far from a bomb


class Addressing(str, Enum):
    UNNUMBERED = "unnumbered"  # RFC 5549: IPv4 routes over IPv6 link-local next hops
    NUMBERED = "numbered"  # a /31 per fabric link


class HostKind(str, Enum):
    """What runs a host's RoCE: rocelab's own engine in the namespace, or Linux Soft-RoCE
    (rdma_rxe) in a small QEMU guest that owns the host's address (docs/rxe.md)."""

    ENGINE = "engine"
    RXE = "rxe"


class FabricMode(str, Enum):
    L3 = "l3"  # routed Clos: BGP per link, ECMP
    L2 = "l2"  # one stretched VLAN: a bridge per switch, 802.1D STP
    EVPN = "evpn"  # the routed Clos as underlay, VXLAN + EVPN overlay, one L2 segment


class Role(str, Enum):
    """The two roles the KV workload knows; a host may carry any other role name too."""

    PREFILL = "prefill"
    DECODE = "decode"


class EcmpHash(str, Enum):
    L3 = "l3"  # source and destination address: every QP between two hosts takes one path
    L4 = "l4"  # the five-tuple: RoCE's UDP source port spreads QPs over the paths


ROLE_NAME = r"[a-z][a-z]{0,8}"  # hosts are <role><n>
ROUTER_KINDS = ("superspine", "spine", "leaf")
RESERVED_ROLES = ROUTER_KINDS + ("super", "host")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, serialize_by_alias=True,
                              validate_by_alias=True, validate_by_name=True)


def _check_speed(v: str) -> str:
    if not SPEED_RE.match(v):
        raise ValueError("must be a rate like 100G, 400G or 25000M")
    try:
        parse_speed(v, None)
    except UnitError as e:
        raise ValueError(str(e).split(" (got")[0]) from None  # the value is shown once
    return v


Mtu = Annotated[int, Field(ge=1280, le=65535)]

# ASNs no router may take (RFC 7607, 6793, 5398, 7300 and IANA's reserved block): FRR
# starts with them and the sessions never come up (AS_TRANS), or they are not ours to use.
RESERVED_ASNS = ((23456, 23456, "AS_TRANS (RFC 6793)"),
                 (64496, 64511, "documentation (RFC 5398)"),
                 (65535, 65535, "reserved (RFC 7300)"),
                 (65536, 65551, "documentation (RFC 5398)"),
                 (65552, 131071, "reserved (IANA)"))
DEFAULT_LEAF_BASE = 65101  # past 16-bit private space (> 434 leaves) the plan uses 4200000000
PRIVATE_ASNS = "64512-65534 or 4200000000-4294967294"  # RFC 6996: what fabrics use


def asn_problem(asn: int) -> str | None:
    """Why `asn` cannot be a router's ASN, as "is ...; use ..." (None: it can). 0 and
    4294967295 (RFC 7607, 7300) are outside every ASN field's 1-4294967294 already."""
    for first, last, why in RESERVED_ASNS:
        if first <= asn <= last:
            what = why if first == last else f"in {first}-{last}, {why}"
            return f"is {what}; use a private ASN ({PRIVATE_ASNS})"
    return None


def _check_asn(v: int) -> int:
    problem = asn_problem(v)
    if problem:
        raise ValueError(f"must not be a reserved ASN: {v} {problem}")
    return v


AsNumber = Annotated[int, Field(ge=1, le=4294967294, json_schema_extra={"not": {"anyOf": [
    {"minimum": first, "maximum": last} for first, last, _ in RESERVED_ASNS]}}),
    AfterValidator(_check_asn)]


RoleName = Annotated[str, AfterValidator(lambda v: _check_role(v))]


class Tier(Strict):
    """Speed and MTU of one tier's links (or one link); unset fields inherit `links:`."""

    speed: str | None = Field(None, description="Line rate, e.g. 400G.")
    mtu: Mtu | None = Field(None, description="IP MTU.")

    @field_validator("speed")
    @classmethod
    def _speed(cls, v: str | None) -> str | None:
        return v if v is None else _check_speed(v)


class Links(Strict):
    speed: str = Field("400G", description="Emulated line rate of every link, e.g. 100G, 400G, 800G.")
    mtu: Mtu = Field(9000, description="IP MTU of every link.")
    host: Tier = Field(default_factory=Tier, description="Host-leaf links, e.g. {speed: 400G}.")
    leaf_spine: Tier = Field(default_factory=Tier, description="Leaf-spine links, e.g. {speed: 800G}.")
    spine_super: Tier = Field(default_factory=Tier, description="Spine-superspine links (3-tier).")
    parallel: Annotated[int, Field(ge=1, le=4)] = Field(
        1, description="Links between each leaf and each spine (1-4): each is its own BGP "
        "session and ECMP path.")
    per_link: dict[str, Tier] = Field(
        default_factory=dict, description="One link's speed or MTU, keyed a-b: "
        "{leaf1-spine1: {speed: 100G}} (every parallel link between the two).")

    @field_validator("speed")
    @classmethod
    def _speed(cls, v: str) -> str:
        return _check_speed(v)


class LinkSpec(Strict):
    """One link of an explicit fabric (`nodes:` + `links:` list)."""

    endpoints: Annotated[list[str], Field(min_length=2, max_length=2)] = Field(
        description="The two nodes it joins, e.g. [leaf1, spine1].")
    speed: str = Field("400G", description="Line rate.")
    mtu: Mtu = Field(9000, description="IP MTU.")

    @field_validator("speed")
    @classmethod
    def _speed(cls, v: str) -> str:
        return _check_speed(v)


class NodeSpec(Strict):
    """One node of an explicit fabric (`nodes:`)."""

    kind: Literal["superspine", "spine", "leaf", "host"] = Field(
        description="Tier: superspine, spine, leaf (hosts attach only to leaves) or host.")
    role: RoleName | None = Field(None, description="Hosts: prefill, decode or any role name.")
    asn: AsNumber | None = Field(
        None, description="Routers: the ASN (default: the asn: plan of its kind).")
    attach: Literal["rail", "dual"] | None = Field(
        None, description="Hosts with several links: rail (an address per NIC) or dual "
        "(one address, ECMP over both leaves).")


def _check_role(v: str) -> str:
    if not re.fullmatch(ROLE_NAME, v) or v in RESERVED_ROLES:
        raise ValueError("must be 1-9 lowercase letters (e.g. prefill, decode, storage), "
                         f"not one of {', '.join(RESERVED_ROLES)}")
    return v


class Bfd(Strict):
    enabled: bool = Field(False, description="Run bfdd and tie every BGP session to BFD.")
    interval_ms: Annotated[int, Field(ge=10, le=60000)] = Field(
        100, description="BFD transmit and receive interval in milliseconds.")
    multiplier: Annotated[int, Field(ge=2, le=255)] = Field(
        3, description="Missed packets before a session is declared down.")


class Bgp(Strict):
    keepalive: Annotated[int, Field(ge=1, le=3600)] = Field(3, description="Seconds.")
    hold: Annotated[int, Field(ge=3, le=65535)] = Field(9, description="Seconds; at least 3 x keepalive.")
    maximum_paths: Annotated[int, Field(ge=1, le=128)] = Field(
        64, description="ECMP paths BGP installs per prefix (maximum-paths).")


class BgpOverride(Strict):
    keepalive: Annotated[int, Field(ge=1, le=3600)] | None = Field(None, description="Seconds.")
    hold: Annotated[int, Field(ge=3, le=65535)] | None = Field(None, description="Seconds.")
    maximum_paths: Annotated[int, Field(ge=1, le=128)] | None = Field(None, description="ECMP paths.")


class BfdOverride(Strict):
    enabled: bool | None = Field(None, description="BFD on this router's sessions.")
    interval_ms: Annotated[int, Field(ge=10, le=60000)] | None = Field(None, description="Milliseconds.")
    multiplier: Annotated[int, Field(ge=2, le=255)] | None = Field(None, description="Missed packets.")


class Override(Strict):
    """Routing knobs of one node, role or group (`overrides:`): node beats group beats role."""

    asn: AsNumber | None = Field(None, description="Routers: ASN.")
    bgp: BgpOverride = Field(default_factory=BgpOverride, description="Timers, maximum_paths.")
    bfd: BfdOverride = Field(default_factory=BfdOverride, description="BFD on or off, timers.")
    ecmp_hash: Annotated[EcmpHash, Field(strict=False)] | None = Field(
        None, description="l3 (addresses) or l4 (five-tuple) multipath hash.")
    mtu: Mtu | None = Field(None, description="MTU of the node's own end of each of its links.")
    frr: str | None = Field(None, description="FRR configuration appended to the router's "
                            "rendered config (route-maps, prefix-lists, neighbor ... shutdown).")


class Asn(Strict):
    spine: AsNumber = Field(
        65000, description="ASN shared by every spine (RFC 7938); with pods: pod p's spines "
        "get spine + p - 1.")
    superspine: AsNumber = Field(
        64900, description="ASN shared by every superspine (3-tier).")
    leaf_base: AsNumber = Field(
        DEFAULT_LEAF_BASE, description="leafN gets leaf_base + N - 1.")
    overrides: dict[str, AsNumber] = Field(
        default_factory=dict, description="Per-router ASN, e.g. {leaf3: 65200}.")


class Pools(Strict):
    loopbacks: str = Field("10.0.0.0/24", description="Router loopbacks (/32 each), spines first.")
    fabric: str = Field("10.1.0.0/16", description="Leaf-spine /31s (numbered addressing only).")
    hosts: str = Field("10.2.0.0/16", description="One /24 per leaf; one /31 per host link in it.")

    @field_validator("loopbacks", "fabric", "hosts")
    @classmethod
    def _network(cls, v: str) -> str:
        try:
            net = ipaddress.IPv4Network(v, strict=True)
        except ValueError as e:
            raise ValueError(f"must be an IPv4 network like 10.0.0.0/24 ({e})") from None
        if (net.subnet_of(THIS_NETWORK) or net.is_loopback or net.is_link_local
                or net.is_multicast or net.is_reserved):
            raise ValueError("must be a unicast range: not 0.0.0.0/8, loopback, link-local "
                             "(169.254/16: unnumbered next hops), multicast or reserved")
        return str(net)


class Hosts(Strict):
    per_leaf: Annotated[int, Field(ge=0, le=64)] = Field(2, description="Hosts attached to each leaf "
                                                         "(each rail group with rails > 1).")
    roles: dict[str, RoleName] = Field(
        default_factory=dict,
        description="Role of each leaf's hosts, e.g. {leaf1: prefill, leaf5: storage}: prefill, "
                    "decode or any role name. Unlisted leaves: the first half prefill, the rest decode.")
    counts: dict[str, Annotated[int, Field(ge=0, le=64)]] = Field(
        default_factory=dict, description="Hosts on one leaf instead of per_leaf, e.g. "
        "{leaf5: 0} for a border or service leaf.")
    rails: Annotated[int, Field(ge=1, le=8)] = Field(
        1, description="NICs per host (rail-optimized): NIC k of every host on the k-th leaf "
        "of its rail group; leaves come in groups of `rails`.")
    dual_homed: bool = Field(False, description="Every host on two leaves (leaf pairs 1-2, "
                             "3-4, ...): one address, ECMP default route over both.")
    kind: Annotated[HostKind, Field(strict=False)] | dict[
        str, Annotated[HostKind, Field(strict=False)]] = Field(
        HostKind.ENGINE, description="engine (rocelab's RoCE engine) or rxe (Linux Soft-RoCE in "
        "a QEMU guest) for every host, or per host or leaf: {prefill1: rxe, leaf3: rxe}.")


class Ecn(Strict):
    enabled: bool = Field(True, description="RED-style CE marking on switch egress queues.")
    kmin: str = Field("150KB", description="Queue depth where marking starts (bytes: 150KB, 1MiB).")
    kmax: str = Field("1500KB", description="Queue depth where marking reaches pmax; every packet above.")
    pmax: Annotated[float, Field(gt=0, le=1, strict=False)] = Field(
        0.2, description="Marking probability at kmax.")
    tcs: list[Annotated[int, Field(ge=0, le=7)]] = Field(
        default_factory=lambda: [3], description="Traffic classes that mark (default: RoCE, TC 3).")
    disabled_on: list[str] = Field(
        default_factory=list, description="Switches with marking off (reproduces 'DCQCN silently off').")

    @field_validator("kmin", "kmax")
    @classmethod
    def _size(cls, v: str) -> str:
        return _check_size(v)


class Pfc(Strict):
    enabled: bool = Field(True, description="PFC-like pause of the lossless TC, hop by hop.")
    xoff: str = Field("1MB", description="Bytes buffered from one ingress port that pause the upstream port.")
    xon: str = Field("800KB", description="Bytes below which the upstream port resumes.")
    disabled_on: list[str] = Field(default_factory=list, description="Switches that never pause.")
    buffer: str = Field("64MiB", description="Per-port buffer of the lossless class (TBF limit): "
                        "what overflows it is dropped (PFC off, or XOFF too close to it).")

    @field_validator("xoff", "xon", "buffer")
    @classmethod
    def _size(cls, v: str) -> str:
        return _check_size(v)


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


class Congestion(Strict):
    enabled: bool = Field(False, description="Shape every port and run ECN, PFC and DCQCN.")
    dilation: Annotated[float, Field(ge=1, strict=False)] | Literal["auto"] = Field(
        "auto", description="Time dilation D (at least 1: a lab never runs faster than the "
        "fabric it emulates): links run at speed/D, protocol timers x D.")
    max_link_rate: str = Field("100M", description="With dilation auto: pick D so speed/D <= this.")
    buffer: str = Field("4MB", description="Per-port buffer of each lossy class (bfifo limit).")
    roce_dscp: Annotated[int, Field(ge=0, le=63)] = Field(26, description="DSCP of RoCE data.")
    cnp_dscp: Annotated[int, Field(ge=0, le=63)] = Field(48, description="DSCP of CNPs.")
    ecn: Ecn = Field(default_factory=Ecn, description="Switch ECN marking.")
    pfc: Pfc = Field(default_factory=Pfc, description="Lossless class pauses.")
    dcqcn: Dcqcn = Field(default_factory=Dcqcn, description="Sender rate control.")

    @field_validator("max_link_rate")
    @classmethod
    def _rate(cls, v: str) -> str:
        return Links._speed(v)

    @field_validator("buffer")
    @classmethod
    def _size(cls, v: str) -> str:
        return _check_size(v)


def _check_size(v: str) -> str:
    try:
        parse_size(v, None)
    except UnitError as e:
        problem = str(e).split(" (got")[0]
        raise ValueError(problem if problem.startswith("must") else
                         "must be a size like 150KB, 1500KB, 1MiB or 4096") from None
    return v


class L2(Strict):
    stp: bool = Field(True, description="Run the kernel's 802.1D spanning tree on every bridge "
                      "(fabric: l2); false builds the loop the storm demo needs.")
    root: str = Field("spine1", description="The switch STP elects root (lowest bridge "
                      "priority); the other spines come next, leaves last.")
    forward_delay: Annotated[int, Field(ge=2, le=30)] = Field(
        4, description="STP forward delay, seconds (kernel: 2-30); a port waits 2 x this "
        "(listening, learning) before it forwards.")
    hello_time: Annotated[int, Field(ge=1, le=10)] = Field(1, description="STP hello, seconds (1-10).")
    max_age: Annotated[int, Field(ge=6, le=40)] = Field(
        6, description="STP max age, seconds (6-40); 802.1D needs "
        "2 x (forward_delay - 1) >= max_age >= 2 x (hello_time + 1).")
    ageing_time: Annotated[int, Field(ge=10, le=1000000)] = Field(
        300, description="Seconds a learned MAC stays in a switch's table.")
    mac_table_limit: Annotated[int, Field(ge=0, le=1000000)] = Field(
        0, description="Most MACs a switch learns (the ASIC table model, bridge "
        "fdb_max_learned); 0 = unlimited. Unknown destinations flood.")
    vni: Annotated[int, Field(ge=1, le=16777215)] = Field(
        10100, description="fabric: evpn: the L2VNI every leaf's VXLAN device carries.")

    @model_validator(mode="after")
    def _timers(self) -> L2:
        if self.max_age > 2 * (self.forward_delay - 1):
            raise ValueError(f"max_age {self.max_age} needs forward_delay >= "
                             f"{self.max_age // 2 + 1 + self.max_age % 2} "
                             "(802.1D: 2 x (forward_delay - 1) >= max_age)")
        if self.max_age < 2 * (self.hello_time + 1):
            raise ValueError(f"max_age {self.max_age} must be at least 2 x (hello_time + 1) "
                             f"= {2 * (self.hello_time + 1)} (802.1D)")
        return self


class EcmpExpect(Strict):
    node: str = Field(description="A router.")
    to: str = Field(description="A host: the width is toward its /31.")
    width: Annotated[int, Field(ge=0, le=64)] = Field(description="Next hops expected (0: no route).")


class SessionExpect(Strict):
    node: str = Field(description="A router.")
    peer: str = Field(description="A router linked to it.")
    state: Literal["established", "down"] = Field("established", description="BGP session state.")


class ReachExpect(Strict):
    src: str = Field(description="A host.")
    dst: str = Field(description="Another host.")
    reachable: bool = Field(True, description="false: expect no ICMP echo reply.")


class RouteExpect(Strict):
    node: str = Field(description="A router or host.")
    prefix: str = Field(description="An IPv4 prefix in its kernel FIB (main table).")
    present: bool = Field(True, description="false: expect the route absent.")

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        return Pools._network(v)


class TransferExpect(Strict):
    src: str = Field(description="A host (the data source).")
    dst: str = Field(description="Another host.")
    size: str = Field("4MiB", description="Bytes to move.")
    op: Literal["write", "read"] = Field("write", description="RDMA WRITE (push) or READ (pull).")
    qps: Annotated[int, Field(ge=1, le=64)] = Field(1, description="Queue pairs.")
    min_goodput: str | None = Field(
        None, description="Lowest acceptable goodput at the real link speed (real-equivalent "
        "under time dilation), e.g. 100G; always: integrity ok.")

    @field_validator("size")
    @classmethod
    def _size(cls, v: str) -> str:
        return _check_size(v)

    @field_validator("min_goodput")
    @classmethod
    def _goodput(cls, v: str | None) -> str | None:
        return v if v is None else Links._speed(v)


class Expectation(Strict):
    """One named expectation of a `validate:` block: exactly one of its kinds."""

    ecmp: EcmpExpect | None = Field(None, description="A router's ECMP width toward a host.")
    session: SessionExpect | None = Field(None, description="A BGP session's state.")
    reach: ReachExpect | None = Field(None, description="Reachability between two hosts.")
    route: RouteExpect | None = Field(None, description="A route present or absent.")
    transfer: TransferExpect | None = Field(None, description="A RoCEv2 transfer's integrity "
                                            "and minimum goodput.")

    @model_validator(mode="after")
    def _one_kind(self) -> Expectation:
        if len([k for k in EXPECT_KINDS if getattr(self, k) is not None]) != 1:
            raise ValueError(f"give exactly one of {', '.join(EXPECT_KINDS)}")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in EXPECT_KINDS if getattr(self, k) is not None)


EXPECT_KINDS = ("ecmp", "session", "reach", "route", "transfer")


class Topology(Strict):
    name: str = Field(description="Lab name: lowercase letters, digits and dashes; "
                                  "namespaces are <name>-<node>.")
    description: str = Field("", description="Free text, shown nowhere but the plan.")
    fabric: Annotated[FabricMode, Field(strict=False)] = Field(
        FabricMode.L3, description="l3 (routed Clos), l2 (one stretched VLAN: a bridge per "
        "switch, STP) or evpn (the routed Clos as underlay, VXLAN/EVPN overlay).")
    addressing: Annotated[Addressing, Field(strict=False)] = Field(
        Addressing.UNNUMBERED, description="unnumbered (RFC 5549) or numbered (/31 per link).")
    spines: Annotated[int, Field(ge=1, le=32)] = Field(2, description="Number of spines (1-32); "
                                                       "with pods: per pod.")
    leaves: Annotated[int, Field(ge=1, le=64)] = Field(4, description="Number of leaves (1-64); "
                                                       "with pods: per pod.")
    pods: Annotated[int, Field(ge=1, le=16)] | None = Field(
        None, description="3-tier Clos: this many pods of `spines` spines and `leaves` leaves, "
        "every spine linked to every superspine.")
    superspines: Annotated[int, Field(ge=0, le=32)] = Field(
        0, description="Superspines above the pods (3-tier; needs pods).")
    hosts: Hosts = Field(default_factory=Hosts, description="Hosts per leaf, roles, rails, homing.")
    links: Links | list[LinkSpec] = Field(
        default_factory=Links, description="Speed and MTU per tier and per link, parallel "
        "links; with nodes: the list of links.")
    nodes: dict[str, NodeSpec] | None = Field(
        None, description="An explicit fabric (escape hatch): name -> {kind, role, asn, "
        "attach}; `links:` is then a list of {endpoints: [a, b], speed, mtu}.")
    groups: dict[str, list[str]] = Field(
        default_factory=dict, description="Named sets of nodes for overrides:, "
        "e.g. {pod1: [spine1, spine2, leaf1, leaf2]}.")
    overrides: dict[str, Override] = Field(
        default_factory=dict, description="Per node, role (superspine, spine, leaf, host, "
        "prefill, ...) or group: asn, bgp, bfd, ecmp_hash, mtu, frr. Node beats group beats role.")
    ecmp_hash: Annotated[EcmpHash, Field(strict=False)] = Field(
        EcmpHash.L4, description="Multipath hash of every router and multi-homed host: l4 "
        "(five-tuple, the default) or l3 (addresses only: RoCE's entropy problem).")
    frr_configs: str | None = Field(
        None, description="A directory (relative to this file) of <router>/frr.conf that "
        "replace the rendered FRR configs, e.g. from `rocelab save`.")
    bfd: Bfd = Field(default_factory=Bfd, description="BFD on the BGP sessions.")
    bgp: Bgp = Field(default_factory=Bgp, description="BGP timers and maximum-paths.")
    asn: Asn = Field(default_factory=Asn, description="ASN plan (RFC 7938 style).")
    pools: Pools = Field(default_factory=Pools, description="Address pools.")
    congestion: Congestion = Field(default_factory=Congestion,
                                   description="Shaping, time dilation, ECN, PFC, DCQCN.")
    l2: L2 = Field(default_factory=L2, description="Bridges, STP and MAC tables "
                   "(fabric: l2; vni and mac_table_limit also for fabric: evpn).")
    validate_: dict[str, Expectation] = Field(
        default_factory=dict, alias="validate",
        description="Named expectations `rocelab validate` (and `up --validate`) checks on "
                    "the running lab: ecmp, session, reach, route, transfer.")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not is_lab_name(v):  # names.py: the one rule every command checks too
            raise ValueError(f"must be {LAB_RULE}")
        return v


UNION_TAGS = {"Links"}  # a union member's name pydantic puts in an error's location


WRONG_BRANCH = {"model_type", "dict_type", "list_type", "model_attributes_type"}


def _union_tag(part: str) -> bool:
    """A union member's tag in an error location ('constrained-float', 'list[LinkSpec]'),
    not a field or key (keys such as leaf1-spine1 carry dashes too)."""
    return part in UNION_TAGS or "[" in part or bool(
        re.match(r"(constrained|function|lax|json|tagged|nullable|default)-", part))


def json_schema() -> dict[str, Any]:
    schema = Topology.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "rocelab topology"
    return schema


def _describe(err: ErrorDetails, model: type[BaseModel]) -> tuple[str, str]:
    # Union members add type tags (e.g. 'constrained-float') to the location: drop them.
    loc = ".".join(str(p) for p in err["loc"] if not _union_tag(str(p)))
    loc = loc or "(top level)"
    kind, got = err["type"], err.get("input")
    if kind == "extra_forbidden":
        parent = _model_at(model, err["loc"][:-1])
        allowed = ", ".join(parent.model_fields) if parent else "?"
        return loc, f"unknown field; allowed: {allowed}"
    if kind == "missing":
        return loc, "is required"
    msg = err["msg"].removeprefix("Value error, ")
    msg = msg[0].lower() + msg[1:] if msg else msg
    if kind == "enum":
        msg = "must be one of " + err["ctx"]["expected"].replace(" or ", ", ")
    shown = json.dumps(got, default=str)
    if len(shown) > MAX_SHOWN:  # an error stays one short line, whatever the input was
        shown = (shown[: MAX_SHOWN - 4] + '..."' if shown.startswith('"')
                 else shown[: MAX_SHOWN - 4] + " ...")
    return loc, f"{msg} (got {shown})"


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model at `loc` inside `model` (through optional fields and list items), or None."""
    current: type[BaseModel] | None = model
    keyed = False  # the field just entered is a mapping: the next part is one of its keys
    for part in loc:
        if current is None:
            return None
        if isinstance(part, int) or keyed or _union_tag(str(part)):  # a list item, a key
            keyed = False
            continue
        field = current.model_fields.get(str(part))
        current = _submodel(field.annotation) if field else None
        keyed = field is not None and typing.get_origin(field.annotation) is dict
    return current


def _submodel(ann: Any) -> type[BaseModel] | None:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    return next((m for m in map(_submodel, typing.get_args(ann)) if m), None)


M = TypeVar("M", bound=BaseModel)


def validate(model: type[M], data: Any, source: str, fields_hint: str | None = None) -> M:
    """Validate loaded YAML data against `model`; SpecError naming the first bad field."""
    if not isinstance(data, dict):
        hint = fields_hint or ", ".join(list(model.model_fields)[:3])
        raise SpecError(source, "(top level)", f"must be a mapping of fields ({hint}, ...)")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        # A union tried every member: the one whose type matched the input says what is wrong.
        errors = sorted(e.errors(), key=lambda x: (x["type"] in WRONG_BRANCH,
                                                   [str(p) for p in x["loc"]]))
        field, problem = _describe(errors[0], model)
        raise SpecError(source, field, problem) from None


def parse(data: Any, source: str = "<topology>") -> Topology:
    """Validate already-loaded topology data (a dict: no line numbers in errors)."""
    return validate(Topology, data, source, "name, spines, leaves")


# -- the YAML boundary: every file a user writes comes in here ---------------

def read_yaml(path: str | Path) -> tuple[Any, yaml.Node | None]:
    """A YAML file's data and its node tree (which knows the line of every value)."""
    p = Path(path)
    try:  # a regular file only, and never more than the limit read (boundedread)
        text = boundedread.read_bytes(p, MAX_FILE_BYTES).decode()
    except OSError as e:
        raise SpecError(str(p), "(file)", f"cannot read: {e.strerror or e}") from None
    except (boundedread.NotRegularError, boundedread.TooLargeError) as e:
        raise SpecError(str(p), "(file)", str(e)) from None
    except UnicodeDecodeError:
        raise SpecError(str(p), "(file)", "is not UTF-8 text") from None
    try:
        _check_shape(text, str(p))
        loader = yaml.SafeLoader(text)  # one parse: the node tree, and the data built from it
        try:
            node = loader.get_single_node()
            return (loader.construct_document(node) if node is not None else None), node
        finally:
            loader.dispose()
    except RecursionError:
        raise SpecError(str(p), "(file)", f"nests deeper than {MAX_DEPTH} levels") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "(file)"
        # ReaderError (a NUL or control character) has no problem, a reason, and a
        # multi-line str: one line, whatever PyYAML says.
        problem = getattr(e, "problem", None) or getattr(e, "reason", None) or str(e)
        raise SpecError(str(p), where, "invalid YAML: " + " ".join(str(problem).split())[:200]
                        ) from None


def _check_shape(text: str, source: str) -> None:
    """Refuse what would expand or nest without bound before building anything from it:
    a YAML bomb (aliases of aliases: 10^9 elements from a few lines) or deep nesting."""
    depth = aliases = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = event.start_mark.line + 1
                raise SpecError(source, f"line {line}", f"nests deeper than {MAX_DEPTH} levels")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                line = event.start_mark.line + 1
                raise SpecError(source, f"line {line}", f"uses more than {MAX_ALIASES} YAML "
                                "aliases (*name): refused, as a YAML bomb would be")


def line_of(node: yaml.Node | None, field: str) -> int | None:
    """The 1-based line of dotted `field` (e.g. flows.2.size) in a YAML node tree: of the
    deepest part that exists, so an unknown key points at the mapping that holds it."""
    line = None
    for part in field.split("."):
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            node = node.value[int(part)]
        elif isinstance(node, yaml.SequenceNode):  # a list of named items (flows): by name
            node = next((item for item in node.value if isinstance(item, yaml.MappingNode)
                         and any(getattr(k, "value", None) == "name" and getattr(v, "value", None) == part
                                 for k, v in item.value)), None)
        else:
            node = None
        if node is None:
            break
        line = node.start_mark.line + 1
    return line


def located(err: SpecError, node: yaml.Node | None) -> SpecError:
    """The same error with the line of its field in the file."""
    line = line_of(node, err.field) if err.line is None else err.line
    return SpecError(err.source, err.field, err.problem, line)


def load_model(path: str | Path, model: type[M], fields_hint: str | None = None) -> M:
    """Read and validate a YAML file (topology, experiment): errors name the file, the
    line and the field, in one line; nothing downstream sees an unvalidated value."""
    data, node = read_yaml(path)
    try:
        return validate(model, data, str(path), fields_hint)
    except SpecError as e:
        raise located(e, node) from None


def load(path: str | Path) -> Topology:
    return load_model(path, Topology, "name, spines, leaves")
