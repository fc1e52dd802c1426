"""What a host kind is: everything rocelab does differently for one, over a default.

A host's kind (`hosts.kind` in the topology, `Node.host_kind` in the plan) is decided
once, when the plan is made. Every place that treats hosts differently asks the host's
kind (`emulator.hosts.kind_of`) instead of testing it. A kind overrides only what
differs from `KindPlugin`, which is a host whose namespace is the host: it answers and
sends the reach check's echoes, runs `rocelab exec` in its namespace, and `up` starts
nothing for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import ClassVar

from .. import netns
from ..engine.job import Job, TransferResult
from ..plan import Node, Plan
from ..spec import HostKind

Progress = Callable[[str], None]  # `up`'s progress lines
TransferProgress = Callable[..., None]  # (bytes done, total, bytes sent), as client.transfer calls it
Booted = dict[str, dict[str, float]]  # host -> what `up` records of what it started for it


class KindPlugin:
    kind: ClassVar[HostKind]
    engine: ClassVar[bool] = True
    """rocelab's engine moves its bytes: experiments and `rocelab perftest` arm it over the
    engine's socket. Otherwise only `transfer` and `kv` drive the host (through `transfer`)."""
    serial: ClassVar[bool] = False
    """It moves one transfer at a time (`kv` holds a lock per host while one runs)."""
    pair_rank: ClassVar[int] = 0
    """A pair of hosts of two kinds is moved by the kind of the higher rank (its transfer
    speaks the other kind's protocol)."""
    probes_reach: ClassVar[bool] = True
    """Its namespace sends the reach check's echoes (it always answers them)."""
    boot_processes: ClassVar[int] = 0
    boot_memory_mb: ClassVar[float] = 0.0
    """The processes and memory (MB) `up` starts for each host of this kind (the estimate)."""
    collector: ClassVar[str]
    """The metrics collector (its name in metrics.collectors.BY_NAME) that reads its hosts."""

    def boot(self, plan: Plan, hosts: list[Node], undo: contextlib.ExitStack,
             progress: Progress) -> Booted:
        """What `up` starts for `hosts` once routing has converged, each undo registered on
        `undo`; what the state file records of it. Default: nothing."""
        return {}

    def ensure(self, plan: Plan, hosts: list[Node]) -> None:
        """Make `hosts` ready to move bytes now (started on first use). Default: nothing."""

    def transfer(self, plan: Plan, src: Node, dst: Node, job: Job,
                 progress: TransferProgress | None = None) -> TransferResult:
        """One pair's transfer, both ends ensured (`ensure`)."""
        raise NotImplementedError

    def exec(self, plan: Plan, node: Node, argv: list[str], env: dict[str, str],
             hide: dict[str, str | None]) -> tuple[int | None, str, str]:
        """`rocelab exec` on the node: (exit code or None if it was cut short, stdout,
        stderr), or (default) this process replaced by argv in the node's namespace
        (netns.exec_in: env, hide), never returning."""
        netns.exec_in(node.netns, argv, env, hide)
        raise AssertionError("exec_in returned")  # it replaces this process or raises

    def why_not_engine(self, plan: Plan, node: Node) -> str:
        """Why an engine-only command cannot drive the host (`engine` is False)."""
        return f"{node.name} is not an engine host"
