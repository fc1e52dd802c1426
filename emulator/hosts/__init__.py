"""Host kinds as plugins: what rocelab does for a host of each kind, asked, never tested.

`kind_of(node)` is a host's kind (`base.KindPlugin`): engine (rocelab's RoCEv2 engine,
the default) or rxe (Linux Soft-RoCE in a QEMU guest). A router or switch has the
default kind's behaviour where it applies (`rocelab exec` in its namespace). `for_kind`
names one; the functions below act on a lab's hosts kind by kind.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from ..plan import Node, Plan
from ..spec import HostKind
from . import engine, rxe
from .base import Booted, KindPlugin, Progress

KINDS: dict[HostKind, KindPlugin] = {k.kind: k for k in (engine.KIND, rxe.KIND)}


def for_kind(kind: HostKind) -> KindPlugin:
    return KINDS[kind]


def kind_of(node: Node) -> KindPlugin:
    """The kind of a host (the plan decided it); a router's or switch's: the default."""
    return KINDS[node.host_kind]


def for_pair(src: Node, dst: Node) -> KindPlugin:
    """The kind that moves a transfer between src and dst: the higher `pair_rank`."""
    return max(kind_of(src), kind_of(dst), key=lambda k: k.pair_rank)


def by_kind(nodes: Iterable[Node]) -> dict[KindPlugin, list[Node]]:
    """`nodes` grouped by kind, in their order (only kinds that have some)."""
    groups: dict[KindPlugin, list[Node]] = {}
    for n in nodes:
        groups.setdefault(kind_of(n), []).append(n)
    return groups


def ensure(plan: Plan, nodes: Iterable[Node]) -> None:
    """Every host of `nodes` ready to move bytes (an engine host's engine started)."""
    for kind, hosts in by_kind(nodes).items():
        kind.ensure(plan, hosts)


def boot(plan: Plan, undo: contextlib.ExitStack, progress: Progress) -> Booted:
    """What `up` starts for the lab's hosts, kind by kind (rxe: the guests), its undo on
    `undo`; host -> what the state file records of it."""
    booted: Booted = {}
    for kind, hosts in by_kind(plan.hosts).items():
        booted |= kind.boot(plan, hosts, undo, progress)
    return booted
