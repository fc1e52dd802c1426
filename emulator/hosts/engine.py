"""Engine hosts (`hosts.kind: engine`, the default): rocelab's RoCEv2 engine in the host's
namespace, a daemon started on the host's first transfer (emulator/engine/)."""

from __future__ import annotations

from typing import ClassVar

from ..engine import client
from ..engine.job import Job, TransferResult
from ..plan import Node, Plan
from ..spec import HostKind
from .base import KindPlugin, TransferProgress


class Engine(KindPlugin):
    kind: ClassVar[HostKind] = HostKind.ENGINE
    collector: ClassVar[str] = "engine"

    def ensure(self, plan: Plan, hosts: list[Node]) -> None:
        client.ensure_engines(plan, hosts)

    def transfer(self, plan: Plan, src: Node, dst: Node, job: Job,
                 progress: TransferProgress | None = None) -> TransferResult:
        return client.transfer(plan, src, dst, job, progress)


KIND = Engine()
