"""Per-node numbers the plan resolves before wiring: routing knobs (the file's globals,
then role < group < node `overrides:`) and ASNs (RFC 7938: per tier, per pod)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import SpecError
from ..spec import DEFAULT_LEAF_BASE, FabricMode, Override, Topology, asn_problem
from .kinds import Kind
from .skeleton import Skeleton, SkNode

MAX_ASN = 4294967294  # 4-byte ASNs; 4294967295 is reserved
LAST_PRIVATE_16, FIRST_PRIVATE_32 = 65534, 4200000000  # RFC 6996 private-use ASNs


def resolve_overrides(topo: Topology, source: str, sk: Skeleton) -> dict[str, dict[str, Any]]:
    """Every node's routing knobs: the file's globals, then role, group and node overrides."""
    _check_override_keys(topo, source, sk)
    out = {}
    for n in sk.nodes:
        keys = [n.kind.value] + ([n.role] if n.role else []) + \
            [g for g, members in topo.groups.items() if n.name in members] + [n.name]
        layers = [(k, topo.overrides[k]) for k in keys if k in topo.overrides]
        out[n.name] = _knobs(topo, source, n, layers)
    return out


def _check_override_keys(topo: Topology, source: str, sk: Skeleton) -> None:
    """Every group, override and ASN override names something the fabric has."""
    names = {n.name: n for n in sk.nodes}
    kinds = {n.kind.value for n in sk.nodes} | {n.role for n in sk.nodes if n.role}
    for group, members in topo.groups.items():
        if group in names or group in kinds:
            raise SpecError(source, f"groups.{group}", "a group needs a name of its own "
                            "(not a node's, kind's or role's)")
        for m in members:
            if m not in names:
                raise SpecError(source, f"groups.{group}", f"no node {m!r}")
    for key in topo.overrides:
        if key not in names and key not in kinds and key not in topo.groups:
            raise SpecError(source, f"overrides.{key}", "names no node, role (" +
                            ", ".join(sorted(kinds)) + ") or group")
    for node in topo.asn.overrides:
        if node not in names or names[node].kind is Kind.HOST:
            routers = [n.name for n in sk.nodes if n.kind is not Kind.HOST]
            raise SpecError(source, f"asn.overrides.{node}", "no such router; routers are "
                            + _names(routers))


def _knobs(topo: Topology, source: str, n: SkNode, layers: list[tuple[str, Override]]
           ) -> dict[str, Any]:
    """One node's knobs: the globals, then each override layer that applies to it in turn."""
    k: dict[str, Any] = {
        "keepalive": topo.bgp.keepalive, "hold": topo.bgp.hold,
        "maximum_paths": topo.bgp.maximum_paths, "bfd": topo.bfd.enabled,
        "interval_ms": topo.bfd.interval_ms, "multiplier": topo.bfd.multiplier,
        "ecmp_hash": topo.ecmp_hash, "mtu": None, "asn": None, "frr": ""}
    for key, o in layers:
        if n.kind is Kind.HOST:
            for field in ("asn", "frr"):
                if getattr(o, field) is not None:
                    raise SpecError(source, f"overrides.{key}.{field}", f"{n.name} is a "
                                    "host: it runs no FRR")
        for field, value in (("keepalive", o.bgp.keepalive), ("hold", o.bgp.hold),
                             ("maximum_paths", o.bgp.maximum_paths), ("bfd", o.bfd.enabled),
                             ("interval_ms", o.bfd.interval_ms),
                             ("multiplier", o.bfd.multiplier), ("ecmp_hash", o.ecmp_hash),
                             ("mtu", o.mtu), ("asn", o.asn)):
            if value is not None:
                k[field] = value
        if o.frr:
            k["frr"] += o.frr if o.frr.endswith("\n") else o.frr + "\n"
    if k["hold"] < 3 * k["keepalive"]:
        where = next((f"overrides.{key}.bgp" for key, o in reversed(layers)
                      if o.bgp.hold is not None or o.bgp.keepalive is not None), "bgp")
        raise SpecError(source, f"{where}.hold", f"{n.name}: hold {k['hold']} must be at "
                        f"least 3 x keepalive ({3 * k['keepalive']})")
    if topo.fabric is FabricMode.L2 and n.kind is not Kind.HOST and (
            k["frr"] or k["asn"] is not None or k["bfd"]):
        raise SpecError(source, f"overrides.{layers[-1][0] if layers else n.name}",
                        "fabric l2 runs no FRR: no asn, bfd or frr")
    return k


def _names(names: list[str]) -> str:
    """spine1..spine2, leaf1..leaf4: a list of generated names, short."""
    runs: list[list[str]] = []
    for name in names:
        stem = name.rstrip("0123456789")
        if runs and runs[-1][0].rstrip("0123456789") == stem:
            runs[-1].append(name)
        else:
            runs.append([name])
    text = ", ".join(r[0] if len(r) == 1 else f"{r[0]}..{r[-1]}" for r in runs)
    return text if len(text) <= 120 else text[:117] + "..."


def asns(topo: Topology, source: str, sk: Skeleton, knobs: dict[str, dict[str, Any]]
         ) -> dict[str, int]:
    """RFC 7938: superspines share one ASN, each pod's spines one, every leaf its own."""
    out = _numbered(topo, sk, knobs)
    leaves = sk.of(Kind.LEAF)
    last = leaves[-1].name if leaves else None
    if last and out[last] > MAX_ASN:
        raise SpecError(source, "asn.leaf_base", f"{last} would get ASN {out[last]}: "
                        f"at most {MAX_ASN - len(leaves) + 1} for {len(leaves)} leaves")

    def field_of(name: str) -> str:
        if topo.nodes is not None:
            return f"nodes.{name}.asn"
        base = {Kind.SPINE: "asn.spine", Kind.SUPERSPINE: "asn.superspine"}
        kinds = {n.name: n.kind for n in sk.nodes}
        return f"asn.overrides.{name}" if name in topo.asn.overrides else (
            f"overrides.{name}.asn" if knobs[name]["asn"] is not None
            else base.get(kinds[name], "asn.leaf_base"))

    for name, asn in out.items():  # a numbering base that runs into a reserved range
        problem = asn_problem(asn) if asn <= MAX_ASN else f"is above {MAX_ASN}"
        if problem:
            raise SpecError(source, field_of(name), f"{name} would get ASN {asn}, which {problem}")
    _check_ebgp(source, sk, out, field_of)
    return out


def _numbered(topo: Topology, sk: Skeleton, knobs: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Each router's ASN by its tier, unless the file gives it (nodes:, overrides:)."""
    out: dict[str, int] = {}
    leaves = sk.of(Kind.LEAF)
    leaf_base = topo.asn.leaf_base
    # The default, not "left unset": `up --name` re-validates a dumped spec, where every
    # field reads as set, and a fabric must number the same either way.
    if leaf_base == DEFAULT_LEAF_BASE and leaf_base + len(leaves) - 1 > LAST_PRIVATE_16:
        leaf_base = FIRST_PRIVATE_32  # RFC 6996: past 16-bit private space, the 4-byte one
    for n in sk.nodes:
        if n.kind is Kind.SUPERSPINE:
            out[n.name] = topo.asn.superspine
        elif n.kind is Kind.SPINE:
            out[n.name] = topo.asn.spine + ((n.pod or 1) - 1)
        elif n.kind is Kind.LEAF:
            out[n.name] = leaf_base + leaves.index(n)
        if n.kind is not Kind.HOST:
            out[n.name] = n.asn or knobs[n.name]["asn"] or topo.asn.overrides.get(n.name) \
                or out[n.name]
    return out


def _check_ebgp(source: str, sk: Skeleton, asns: dict[str, int],
                field_of: Callable[[str], str]) -> None:
    """Every leaf an ASN of its own, and no link between two routers of one ASN."""
    seen: dict[int, str] = {}
    others: dict[int, str] = {}
    for n in sk.nodes:
        if n.kind in (Kind.SPINE, Kind.SUPERSPINE):
            others.setdefault(asns[n.name], n.name)
    for leaf in sk.of(Kind.LEAF):  # RFC 7938: a leaf needs its own ASN or eBGP loop checks drop routes
        asn = asns[leaf.name]
        clash = seen.get(asn) or others.get(asn)
        if clash:
            raise SpecError(source, field_of(leaf.name),
                            f"{leaf.name} would get ASN {asn}, already used by {clash}")
        seen[asn] = leaf.name
    for link in sk.links:
        if link.a in asns and link.b in asns and asns[link.a] == asns[link.b]:
            raise SpecError(source, field_of(link.a), f"{link.a} and {link.b} are linked and "
                            f"share ASN {asns[link.a]}: every session is eBGP")
