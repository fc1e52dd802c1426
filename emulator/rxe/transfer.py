"""Transfers with an rxe host at one end (or both): the host side of emulator/rxe/kvpeer.py.

The rxe end runs kvpeer in its guest through the agent: as the initiator when it is
the side that posts (WRITE's source, READ's destination), else as a server on the
guest's own TCP 18515, started (and listening) before the engine initiates. The
engine end runs unchanged: kvpeer speaks its peer protocol. The result has an engine
transfer's keys, plus `peer_digest` (the other end's hash) and `rxe` (each rxe end's
hw_counters deltas); integrity_ok holds only if both ends' digests agree.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import forwarding
from ..engine import client
from ..engine.job import Job, Op, TransferResult
from ..errors import EngineError
from ..plan import Node, Plan
from ..spec import HostKind
from . import guest
from .hosts import vm_for
from .vm import RxeVm

PYTHON = "/usr/bin/python3"  # the system Python: Debian's python3-pyverbs is built for it
SOURCE = Path(__file__).with_name("kvpeer.py")
POLL_S = 0.25
LISTEN_TIMEOUT_S = 60.0  # Python starting over 9p under TCG: ~1.5 s idle, more when loaded
Progress = Callable[..., None]  # (bytes done, total, bytes sent), as client.transfer calls it


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

    def until(self, wanted: str, deadline: float, progress: Progress | None = None) -> dict[str, Any]:
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
    peer = GuestPeer(vm_for(plan, host), ["serve", "--ip", host.address or "",
                                          "--timeout", str(timeout_s)])
    try:
        peer.until("listening", time.monotonic() + LISTEN_TIMEOUT_S)
    except BaseException:
        peer.stop()
        raise
    return peer


def run(plan: Plan, src: Node, dst: Node, job: Job,
        progress: Progress | None = None) -> TransferResult:
    """Move job's bytes from src to dst, either or both of them rxe hosts."""
    job = dataclasses.replace(job, extra={"flow": f"{src.name}->{dst.name}", **job.extra,
                                          "src": src.name, "dst": dst.name})
    initiator, responder = (src, dst) if job.op is Op.WRITE else (dst, src)
    client.ensure_engines(plan, [h for h in (initiator, responder) if not is_rxe(h)])
    server = serve(plan, responder, job.timeout_s) if is_rxe(responder) else None
    try:
        if is_rxe(initiator):
            peer = GuestPeer(vm_for(plan, initiator), [
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


if __name__ == "__main__":  # python -m emulator.rxe.transfer LAB SRC DST SIZE [read]
    from .. import state
    from ..units import parse_size

    lab_plan = state.lab_plan(sys.argv[1])
    op = Op(sys.argv[5]) if len(sys.argv) > 5 else Op.WRITE
    print(json.dumps(run(lab_plan, lab_plan.node(sys.argv[2]), lab_plan.node(sys.argv[3]),
                         Job(op, size=parse_size(sys.argv[4]))), indent=1))
