"""The topology file, validated at the boundary.

Everything a user may write is declared here with pydantic (`extra="forbid"`,
strict types), so a typo is an error naming the field, never a silent default.
`load()` turns any problem into one `SpecError` line; nothing downstream ever
sees an unvalidated value.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from ..names import LAB_NAME, LAB_RULE, MAX_LAB_NAME, NODE_NAME, is_lab_name
from .boundary import Strict, load_model, validate
from .congestion import Congestion
from .fields import DEFAULT_LEAF_BASE, AsNumber, Mtu, Network, RoleName, Size, Speed


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



class Tier(Strict):
    """Speed and MTU of one tier's links (or one link); unset fields inherit `links:`."""

    speed: Speed | None = Field(None, description="Line rate, e.g. 400G.")
    mtu: Mtu | None = Field(None, description="IP MTU.")


class Links(Strict):
    speed: Speed = Field("400G", description="Emulated line rate of every link, e.g. 100G, 400G, 800G.")
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


class LinkSpec(Strict):
    """One link of an explicit fabric (`nodes:` + `links:` list)."""

    endpoints: Annotated[list[str], Field(min_length=2, max_length=2)] = Field(
        description="The two nodes it joins, e.g. [leaf1, spine1].")
    speed: Speed = Field("400G", description="Line rate.")
    mtu: Mtu = Field(9000, description="IP MTU.")


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
    aggregate_hosts: bool = Field(
        False, description="fabric l3: each leaf announces one /24 covering its hosts' /31s "
        "(aggregate-address summary-only) instead of a /31 per host NIC; big fabrics "
        "converge several times faster (docs/scale.md).")


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
    loopbacks: Network = Field("10.0.0.0/24", description="Router loopbacks (/32 each), spines first.")
    fabric: Network = Field("10.1.0.0/16", description="Leaf-spine /31s (numbered addressing only).")
    hosts: Network = Field("10.2.0.0/16", description="One /24 per leaf; one /31 per host link in it.")


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
    prefix: Network = Field(description="An IPv4 prefix in its kernel FIB (main table).")
    present: bool = Field(True, description="false: expect the route absent.")


class TransferExpect(Strict):
    src: str = Field(description="A host (the data source).")
    dst: str = Field(description="Another host.")
    size: Size = Field("4MiB", description="Bytes to move.")
    op: Literal["write", "read"] = Field("write", description="RDMA WRITE (push) or READ (pull).")
    qps: Annotated[int, Field(ge=1, le=64)] = Field(1, description="Queue pairs.")
    min_goodput: Speed | None = Field(
        None, description="Lowest acceptable goodput at the real link speed (real-equivalent "
        "under time dilation), e.g. 100G; always: integrity ok.")


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


def _whole(regex: str) -> str:
    """A names.py rule as a JSON-schema pattern: anchored (a pattern matches anywhere), and
    (?!\\n) because Python's $ (the jsonschema package's) also matches before a final newline."""
    return f"^(?:{regex})$(?!\\n)"


class Topology(Strict):
    name: str = Field(description="Lab name: lowercase letters, digits and dashes; "
                                  "namespaces are <name>-<node>.",
                      json_schema_extra={"pattern": _whole(LAB_NAME), "maxLength": MAX_LAB_NAME})
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
    planes: Annotated[int, Field(ge=1, le=8)] = Field(
        1, description="Parallel planes (1-8): plane k (0-based) is its own Clos of `spines` "
        "spines and `leaves` leaves (p<k>spine<i>, p<k>leaf<j>); every host has one NIC per "
        "plane, NIC k on plane k. 1: one fabric, names unchanged (fabric l3 only).")
    hosts: Hosts = Field(default_factory=Hosts, description="Hosts per leaf, roles, rails, homing.")
    links: Links | list[LinkSpec] = Field(
        default_factory=Links, description="Speed and MTU per tier and per link, parallel "
        "links; with nodes: the list of links.")
    nodes: dict[str, NodeSpec] | None = Field(
        None, description="An explicit fabric (escape hatch): name -> {kind, role, asn, "
        "attach}; `links:` is then a list of {endpoints: [a, b], speed, mtu}.",
        json_schema_extra={"propertyNames": {"pattern": _whole(NODE_NAME)}})
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
    bgp: Bgp = Field(default_factory=Bgp, description="BGP timers, maximum-paths, host aggregates.")
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



def json_schema() -> dict[str, Any]:
    schema = Topology.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "rocelab topology"
    return schema


def parse(data: Any, source: str = "<topology>") -> Topology:
    """Validate already-loaded topology data (a dict: no line numbers in errors)."""
    return validate(Topology, data, source, "name, spines, leaves")


def load(path: str | Path) -> Topology:
    return load_model(path, Topology, "name, spines, leaves")
