"""The CLI's side of the engines: start them in host namespaces, run transfers.

Engines are started on first use and keep running until `rocelab down`
(they carry the lab's ROCELAB_LAB tag like every other lab process).
"""

from __future__ import annotations

import dataclasses
import functools
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import forwarding, procs, rundirs
from ..errors import EngineError, RocelabError
from ..paths import node_run_dir
from ..plan import Node, Plan
from ..roce import wire
from .config import for_host
from .job import Job, Op, TransferResult
from .jsonlines import MAX_REPLY_LINE, Channel

START_TIMEOUT_S = 15.0
Progress = Callable[[int, int, int], None]  # (bytes completed, total, bytes sent)


def sock_path(plan: Plan, host: Node) -> Path:
    return node_run_dir(plan.lab, host.name) / "engine.sock"


def _connect(path: Path) -> Channel:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(path))
    except OSError:
        s.close()
        raise
    return Channel(s, MAX_REPLY_LINE)  # our own engine's replies (stats grow with QPs)


def _alive(path: Path) -> bool:
    try:
        with _connect(path) as ch:
            ch.send({"cmd": "ping"})
            return ch.recv().get("event") == "pong"
    except (OSError, EngineError):
        return False


def ensure_engines(plan: Plan, hosts: list[Node]) -> None:
    """Start an engine in every host that lacks one; return when all answer (EngineError,
    the ones that did not killed, if one exits first or they take too long)."""
    starting = []
    for host in hosts:
        path = sock_path(plan, host)
        if _alive(path):
            continue
        rundirs.make_private_dir(path.parent, exist_ok=True)  # the host's dir: root's only
        engine = procs.start(
            plan.lab, [sys.executable, "-m", "emulator.engine.daemon", "--lab", plan.lab,
                       "--host", host.name, "--ip", host.address or "", "--sock", str(path),
                       *[a for ip in host.addresses[1:] for a in ("--rail-ip", ip)],
                       "--config", for_host(plan, host).to_json(),
                       *(["--pure"] if wire.forced_pure() else [])],
            name=f"the engine on {host.name}", log=path.parent / "engine.log",
            netns_name=host.netns, error=EngineError)
        starting.append((engine, procs.Ready(f"an answer on {path.name}",
                                             functools.partial(_alive, path))))
    procs.wait_ready(starting, START_TIMEOUT_S)


def transfer(plan: Plan, src: Node, dst: Node, job: Job,
             progress: Progress | None = None, resolve: bool = True) -> TransferResult:
    """Move job's bytes from src (prefill) to dst (decode); returns the result dict.

    WRITE: src's engine pushes. READ: dst's engine pulls (NIXL style). Both engines
    label the transfer's QPs with its flow: `job.extra["flow"]` (an experiment's flow
    name) or "SRC->DST", so every handoff between two hosts adds to one flow's series.
    """
    initiator, peer = (src, dst) if job.op is Op.WRITE else (dst, src)
    job = dataclasses.replace(job, extra={"flow": f"{src.name}->{dst.name}", **job.extra,
                                          "src": src.name, "dst": dst.name})

    def on_event(event: str, msg: dict[str, Any]) -> None:
        if event == "progress" and progress:
            progress(msg["bytes"], msg["total"], msg.get("sent", msg["bytes"]))

    msg = call(plan, initiator, {"cmd": "transfer", "job": job.to_json(),
                                 "peer_ip": peer.address}, on_event)
    res = TransferResult(**msg, src=src.name, dst=dst.name)  # type: ignore[typeddict-item]  # JSON reply
    if resolve:
        resolve_spines(plan, src, dst, res)
    return res


def resolve_spines(plan: Plan, src: Node, dst: Node, res: TransferResult) -> None:
    """Fill in the spine each QP (and each MRC path) of a finished transfer took: the
    kernel's choice now (`transfer(resolve=False)` leaves it to the caller, who may do
    it while the next transfer runs: a handoff need not wait for `ip route get`)."""
    for i, qp in enumerate(res["qps"]):  # QP i on rail i: NIC i mod NICs at each end
        rail = i % len(src.addresses) if len(src.addresses) > 1 else None
        qp["rail"] = rail
        qp["spine"] = forwarding.egress_port(plan, src, dst, qp["udp_sport"], rail=rail)
    _resolve_paths(plan, src, dst, (res.get("mrc") or {}).get("paths", []))


def _resolve_paths(plan: Plan, src: Node, dst: Node, paths: list[dict[str, Any]]) -> None:
    """Each MRC path's `spine`: the uplink src's leaf picks for its EV, as a QP's (a plane
    of a multi-NIC host enters the fabric at that NIC's leaf)."""
    planes: dict[int, list[dict[str, Any]]] = {}
    for path in paths:
        planes.setdefault(path["plane"], []).append(path)
    for plane, group in planes.items():
        rail = plane if len(src.addresses) > 1 else None
        try:
            spines = forwarding.egress_ports(plan, src, dst, [p["ev"] for p in group], rail=rail)
        except RocelabError:  # no route on that plane now (a plane or a leaf lost): unknown,
            spines = [None] * len(group)  # not a failed transfer (contract 4: null)
        for path, spine in zip(group, spines):
            path["spine"] = spine


def call(plan: Plan, host: Node, msg: dict[str, Any],
         on_event: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Send one command to `host`'s engine and read its replies until the result, which
    is returned (without its "event"); interim events (progress, armed) go to
    `on_event(event, reply)`; an error reply raises EngineError naming the host."""
    with _connect(sock_path(plan, host)) as ch:
        ch.send(msg)
        while True:
            reply = ch.recv()
            event = reply.pop("event", None)
            if event == "result":
                return reply
            if event == "error":
                raise EngineError(f"{host.name}: {reply['error']}")
            if on_event and event:
                on_event(event, reply)


def _request(plan: Plan, host: Node, msg: dict[str, Any]) -> dict[str, Any]:
    with _connect(sock_path(plan, host)) as ch:
        ch.send(msg)
        reply = ch.recv()
    if reply.get("event") == "error":
        raise EngineError(f"{host.name}: {reply['error']}")
    return reply


def prepare(plan: Plan, host: Node, job: Job) -> bool:
    """Have `host`'s engine make (and keep) the source region of `job` before its
    transfers are timed, so no handoff includes generating its test data (job.py's
    source cache); False: the region is too large to keep, or the engine predates
    `prepare` (a lab left running across an upgrade): each transfer makes it then."""
    try:
        return bool(_request(plan, host, {"cmd": "prepare", "job": job.to_json()}).get("cached"))
    except EngineError:  # an optimisation only: the transfer itself reports real errors
        return False


def stats(plan: Plan, host: Node) -> dict[str, Any]:
    return _request(plan, host, {"cmd": "stats"})


def set_dcqcn(plan: Plan, host: Node, profile: str) -> dict[str, Any]:
    """Switch a host's DCQCN profile (nvidia, paper, off) for its current and future QPs."""
    ensure_engines(plan, [host])
    return _request(plan, host, {"cmd": "dcqcn", "profile": profile})
