"""The topology file, validated at the boundary, split by job:

    boundary    the Strict base (`extra="forbid"`, strict types), validation into one
                SpecError line, and the YAML reader: `load_model` for any file
    fields      the value rules: speeds, sizes, MTUs, ASNs, role names, address pools
    topology    the topology's models (Topology and its sections, the `validate:`
                block), `parse`, `load` and the JSON schema `rocelab schema` prints
    congestion  the `congestion:` section as written

`from emulator.spec import X` works for every public name below.
"""

from __future__ import annotations

from ..names import LAB_NAME, LAB_RULE, MAX_LAB_NAME, NODE_NAME, is_lab_name
from .boundary import (
    MAX_ALIASES,
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_SHOWN,
    Strict,
    line_of,
    load_model,
    located,
    read_yaml,
    validate,
)
from .congestion import Congestion, Dcqcn, Ecn, Pfc
from .fields import (
    DEFAULT_LEAF_BASE,
    PRIVATE_ASNS,
    RESERVED_ASNS,
    RESERVED_ROLES,
    ROLE_NAME,
    ROUTER_KINDS,
    THIS_NETWORK,
    AsNumber,
    Mtu,
    RoleName,
    asn_problem,
)
from .topology import (
    EXPECT_KINDS,
    L2,
    Addressing,
    Asn,
    Bfd,
    BfdOverride,
    Bgp,
    BgpOverride,
    EcmpExpect,
    EcmpHash,
    Expectation,
    FabricMode,
    HostKind,
    Hosts,
    Links,
    LinkSpec,
    NodeSpec,
    Override,
    Pools,
    ReachExpect,
    Role,
    RouteExpect,
    SessionExpect,
    Tier,
    Topology,
    TransferExpect,
    json_schema,
    load,
    parse,
)

__all__ = [
    "DEFAULT_LEAF_BASE", "EXPECT_KINDS", "L2", "LAB_NAME", "LAB_RULE", "MAX_ALIASES", "MAX_DEPTH",
    "MAX_FILE_BYTES", "MAX_LAB_NAME", "MAX_SHOWN", "NODE_NAME", "PRIVATE_ASNS", "RESERVED_ASNS",
    "RESERVED_ROLES", "ROLE_NAME", "ROUTER_KINDS", "THIS_NETWORK", "Addressing", "Asn", "AsNumber",
    "Bfd", "BfdOverride", "Bgp", "BgpOverride", "Congestion", "Dcqcn", "Ecn", "EcmpExpect",
    "EcmpHash", "Expectation", "FabricMode", "HostKind", "Hosts", "LinkSpec", "Links", "Mtu",
    "NodeSpec", "Override", "Pfc", "Pools", "ReachExpect", "Role", "RoleName", "RouteExpect",
    "SessionExpect", "Strict", "Tier", "Topology", "TransferExpect", "asn_problem", "is_lab_name",
    "json_schema", "line_of", "load", "load_model", "located", "parse", "read_yaml", "validate",
]
