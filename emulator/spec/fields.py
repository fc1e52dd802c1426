"""The value rules of topology fields: speeds, sizes, MTUs, ASNs (reserved ranges
refused), role names and address pools. Each check raises ValueError with the rule,
which the boundary turns into one line naming the field."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import AfterValidator, Field

from ..units import SPEED_RE, UnitError, parse_size, parse_speed

THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
ROLE_NAME = r"[a-z][a-z]{0,8}"  # hosts are <role><n>
ROUTER_KINDS = ("superspine", "spine", "leaf")
RESERVED_ROLES = ROUTER_KINDS + ("super", "host")


def check_speed(v: str) -> str:
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


def check_asn(v: int) -> int:
    problem = asn_problem(v)
    if problem:
        raise ValueError(f"must not be a reserved ASN: {v} {problem}")
    return v


AsNumber = Annotated[int, Field(ge=1, le=4294967294, json_schema_extra={"not": {"anyOf": [
    {"minimum": first, "maximum": last} for first, last, _ in RESERVED_ASNS]}}),
    AfterValidator(check_asn)]


RoleName = Annotated[str, AfterValidator(lambda v: check_role(v))]


def check_role(v: str) -> str:
    if not re.fullmatch(ROLE_NAME, v) or v in RESERVED_ROLES:
        raise ValueError("must be 1-9 lowercase letters (e.g. prefill, decode, storage), "
                         f"not one of {', '.join(RESERVED_ROLES)}")
    return v


def check_size(v: str) -> str:
    try:
        parse_size(v, None)
    except UnitError as e:
        problem = str(e).split(" (got")[0]
        raise ValueError(problem if problem.startswith("must") else
                         "must be a size like 150KB, 1500KB, 1MiB or 4096") from None
    return v


def check_network(v: str) -> str:
    """A unicast IPv4 range in CIDR form, normalised."""
    try:
        net = ipaddress.IPv4Network(v, strict=True)
    except ValueError as e:
        raise ValueError(f"must be an IPv4 network like 10.0.0.0/24 ({e})") from None
    if (net.subnet_of(THIS_NETWORK) or net.is_loopback or net.is_link_local
            or net.is_multicast or net.is_reserved):
        raise ValueError("must be a unicast range: not 0.0.0.0/8, loopback, link-local "
                         "(169.254/16: unnumbered next hops), multicast or reserved")
    return str(net)


# Strings checked by the rules above (pydantic runs each after the type check).
Speed = Annotated[str, AfterValidator(check_speed)]  # a line rate: 400G, 25000M
Size = Annotated[str, AfterValidator(check_size)]  # bytes: 150KB, 1MiB, 4096
Network = Annotated[str, AfterValidator(check_network)]  # a unicast IPv4 range, normalised
