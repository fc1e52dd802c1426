"""rxe hosts (`hosts.kind: rxe`): Linux Soft-RoCE in a QEMU/TCG guest that takes the host's
place in the fabric (emulator/rxe/, docs/rxe.md).

`up` boots every guest once routing has converged (rxe/hosts.py). A transfer with an rxe
end (or two) runs emulator/rxe/kvpeer.py in the guest through its agent: as the
initiator when it is the side that posts (WRITE's source, READ's destination), else as
a server on the guest's own TCP 18515, started (and listening) before the engine
initiates. The engine end runs unchanged: kvpeer speaks its peer protocol. The result
has an engine transfer's keys, plus `peer_digest` (the other end's hash) and `rxe` (each
rxe end's hw_counters deltas); integrity_ok holds only if both ends' digests agree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from pathlib import Path
from typing import Any, ClassVar

from .. import forwarding
from ..engine import client
from ..engine.job import Job, Op, TransferResult
from ..errors import EngineError
from ..plan import Node, Plan
from ..rxe import guest
from ..rxe import hosts as guests
from ..rxe.vm import RxeVm, VmError
from ..spec import HostKind
from .base import Booted, KindPlugin, Progress, TransferProgress

PYTHON = "/usr/bin/python3"  # the system Python: Debian's python3-pyverbs is built for it
SOURCE = Path(guest.__file__).with_name("kvpeer.py")
POLL_S = 0.25
LISTEN_TIMEOUT_S = 60.0  # Python starting over 9p under TCG: ~1.5 s idle, more when loaded
# QEMU's RSS per guest, measured: 292-294 MiB after boot, 454-480 MiB after three 32 MiB
# transfers (TCG's translation cache grows past the guest's RAM); budgeted as the guest's
# whole RAM (384 MiB) plus 128 MiB of QEMU's own: 512
GUEST_MB = RxeVm.memory_mib + 128


class Rxe(KindPlugin):
    kind: ClassVar[HostKind] = HostKind.RXE
    engine: ClassVar[bool] = False
    serial: ClassVar[bool] = True  # one kvpeer owns the guest's 18515; its counters are the device's
    pair_rank: ClassVar[int] = 1  # kvpeer speaks the engine's peer protocol
    probes_reach: ClassVar[bool] = False  # the namespace gave its address to the guest
    boot_processes: ClassVar[int] = 1  # its QEMU
    boot_memory_mb: ClassVar[float] = GUEST_MB
    collector: ClassVar[str] = "rxe"

    def boot(self, plan: Plan, hosts: list[Node], undo: contextlib.ExitStack,
             progress: Progress) -> Booted:
        return guests.boot_all(plan, hosts, undo, progress)

    def transfer(self, plan: Plan, src: Node, dst: Node, job: Job,
                 progress: TransferProgress | None = None) -> TransferResult:
        return run(plan, src, dst, job, progress)

    def exec(self, plan: Plan, node: Node, argv: list[str], env: dict[str, str],
             hide: dict[str, str | None]) -> tuple[int | None, str, str]:
        """In the guest, through its agent: the output once it exits, no stdin."""
        try:
            return guests.vm_for(plan, node).exec(argv)
        except FileNotFoundError as e:  # its run dir: not a missing command
            raise VmError(f"{node.name}: no rxe guest to run it in ({e})") from None

    def why_not_engine(self, plan: Plan, node: Node) -> str:
        return (f"{node.name} is an rxe host (Linux Soft-RoCE in a guest); only `rocelab "
                f"transfer` and `rocelab kv` drive one: `rocelab exec {plan.lab} {node.name} "
                "-- ib_write_bw ...` runs perftest there")


KIND = Rxe()


def is_rxe(node: Node) -> bool:
    return node.host_kind is HostKind.RXE


class GuestPeer:
    """One kvpeer run in a guest: spawned, its JSON lines read as they come."""

    def __init__(self, vm: RxeVm, args: list[str]):
        self.vm = vm
        # the module's source goes in argv: the guest's 9p view of the repo is cached
        # (cache=loose) and may lag an edit; the modules it imports change less
        argv = [PYTHON, "-c", SOURCE.read_text(), *args]
        self.job = vm.spawn(argv, env={"PYTHONPATH": str(guest.REPO), "PYTHONDONTWRITEBYTECODE": "1"})
        self.seen = 0
        self.rc: int | None = None

    def events(self) -> list[dict[str, Any]]:
        out, _ = self.vm.read(self.job)
        lines = out.splitlines()
        complete = lines if out.endswith("\n") else lines[:-1]
        new, self.seen = complete[self.seen:], len(complete)
        return [json.loads(line) for line in new if line.startswith("{")]

    def poll(self, timeout: float = POLL_S) -> bool:
        """True once the process has exited."""
        if self.rc is None:
            self.rc = self.vm.wait(self.job, timeout=timeout)
        return self.rc is not None

    def until(self, wanted: str, deadline: float, progress: TransferProgress | None = None) -> dict[str, Any]:
        """Read events until one of kind `wanted` (forwarding progress); EngineError on error."""
        while True:
            exited = self.poll()
            for ev in self.events():
                kind = ev.pop("event", None)
                if kind == wanted:
                    return ev
                if kind == "error":
                    raise EngineError(f"{self.vm.name} (rxe): {ev['error']}")
                if kind == "progress" and progress:
                    progress(ev["bytes"], ev["total"], ev["bytes"])
            if exited:
                _, err = self.vm.read(self.job)
                raise EngineError(f"{self.vm.name} (rxe): kvpeer exited {self.rc} before "
                                  f"{wanted!r}: {err.strip()[-400:] or 'no output'}")
            if time.monotonic() > deadline:
                raise EngineError(f"{self.vm.name} (rxe): no {wanted!r} from kvpeer in time")

    def stop(self) -> None:
        if self.rc is None:
            self.vm.kill(self.job)


def serve(plan: Plan, host: Node, timeout_s: float) -> GuestPeer:
    """kvpeer listening on the guest's 18515 (returns once it listens)."""
    peer = GuestPeer(guests.vm_for(plan, host), ["serve", "--ip", host.address or "",
                                          "--timeout", str(timeout_s)])
    try:
        peer.until("listening", time.monotonic() + LISTEN_TIMEOUT_S)
    except BaseException:
        peer.stop()
        raise
    return peer


def run(plan: Plan, src: Node, dst: Node, job: Job,
        progress: TransferProgress | None = None) -> TransferResult:
    """Move job's bytes from src to dst, either or both of them rxe hosts (an engine end's
    engine started)."""
    job = dataclasses.replace(job, extra={"flow": f"{src.name}->{dst.name}", **job.extra,
                                          "src": src.name, "dst": dst.name})
    initiator, responder = (src, dst) if job.op is Op.WRITE else (dst, src)
    server = serve(plan, responder, job.timeout_s) if is_rxe(responder) else None
    try:
        if is_rxe(initiator):
            peer = GuestPeer(guests.vm_for(plan, initiator), [
                "initiate", "--ip", initiator.address or "", "--peer-ip", responder.address or "",
                "--job", json.dumps(job.to_json(), separators=(",", ":"))])
            try:
                res = peer.until("result", time.monotonic() + job.timeout_s + LISTEN_TIMEOUT_S,
                                 progress)
            finally:
                peer.stop()
            rxe = {initiator.name: res.pop("rxe")}
            for qp in res["qps"]:
                qp["rail"] = None
                qp["spine"] = forwarding.egress_port(plan, src, dst, qp["udp_sport"])
            result: dict[str, Any] = res | {"src": src.name, "dst": dst.name}
        else:
            result = dict(client.transfer(plan, src, dst, job, progress))
            rxe = {}
        if server is not None:
            served = server.until("result", time.monotonic() + LISTEN_TIMEOUT_S)
            rxe[responder.name] = served["rxe"]
            # the engine compared the digest kvpeer sent; check it from the rxe side too
            result["peer_digest"] = served["digest"]
            result["integrity_ok"] = bool(result["integrity_ok"]) and \
                served["digest"] == result["digest"]
    finally:
        if server is not None:
            server.stop()
    result["rxe"] = rxe
    return TransferResult(**result)  # type: ignore[typeddict-item]
