"""The engine's data thread: owns the Endpoint, memory and every QP.

RC state machines are not thread-safe and the hot loop must stay lean, so
one thread runs them all; control threads hand it closures through `call`
and learn about progress through `Watch` objects it updates.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..roce.endpoint import Endpoint
from ..roce.memory import MemoryTable
from ..roce.mrc_endpoint import MrcEndpoint
from ..roce.rc import QueuePair
from ..roce.transport import Transport
from ..roce.verbs import QpState, WcStatus
from .mrcplane import MrcPlane

T = TypeVar("T")
IDLE_WAIT_S = 0.005  # how long an idle engine blocks on the wire before looking at commands


@dataclass
class Watch:
    """Completion tracking for one transfer's work requests."""

    expected: int
    lengths: dict[int, int]  # wr_id -> bytes
    done: threading.Event = field(default_factory=threading.Event)
    completed: int = 0
    bytes_done: int = 0
    error: str | None = None

    def complete(self, wr_id: int, status: WcStatus) -> None:
        if status is not WcStatus.SUCCESS:
            self.fail(f"work request {wr_id}: {status.value}")
            return
        self.completed += 1
        self.bytes_done += self.lengths.get(wr_id, 0)
        if self.completed == self.expected:
            self.done.set()

    def fail(self, reason: str) -> None:
        if self.error is None:
            self.error = reason
        self.done.set()


@dataclass
class Gap:
    """Longest pause in in-order delivery seen by one QP (data-plane interruption)."""

    last_rx: int = 0
    last_t: float | None = None
    max_gap_s: float = 0.0

    def update(self, rx_packets: int, now: float) -> None:
        if rx_packets != self.last_rx:
            if self.last_t is not None:
                self.max_gap_s = max(self.max_gap_s, now - self.last_t)
            self.last_rx, self.last_t = rx_packets, now


def reductions(qp: QueuePair) -> int:
    """A QP's DCQCN rate cuts so far (0 without DCQCN)."""
    rp = getattr(qp, "rp", None)
    return int(rp.reductions) if rp is not None else 0


FlowKey = tuple[str, str, str]  # (flow name, src host, dst host)


@dataclass
class Flow:
    """A flow's totals over every QP that served it (telemetry: series that stay put
    while QPNs change with every handoff). `retired`: summed counters of its finished
    QPs; `transfers`: the transfers this engine initiated for it and finished;
    `work_requests`: the RDMA ops it posted for them."""

    retired: dict[str, int] = field(default_factory=dict)
    transfers: int = 0
    work_requests: int = 0  # RDMA ops this engine posted for it (descriptors, messages)

    def retire(self, counters: dict[str, int], cuts: int) -> None:
        for k, v in counters.items():
            self.retired[k] = self.retired.get(k, 0) + v
        self.retired["dcqcn_reductions"] = self.retired.get("dcqcn_reductions", 0) + cuts


class DataPlane(threading.Thread):
    def __init__(self, local_ip: str, dscp: int, key_seed: int, rail_ips: tuple[str, ...] = (),
                 mrc_dscp: int = 18):
        super().__init__(name="dataplane", daemon=True)
        self.transport = Transport(local_ip, rail_ips=rail_ips)
        self.mrc = MrcPlane(MrcEndpoint((local_ip, *rail_ips), dscp=mrc_dscp))  # MRC connections
        self.endpoint = Endpoint(self.transport, dscp=dscp)
        self.memory = MemoryTable(key_seed=key_seed)
        self.qps: dict[int, QueuePair] = {}
        self.watches: dict[int, Watch] = {}  # qpn -> watch of the transfer it serves
        self.gaps: dict[int, Gap] = {}
        self.peers: dict[int, str] = {}  # qpn -> peer address (telemetry: who a transfer is with)
        self.retired: dict[str, int] = {}  # counters of QPs no longer served, summed (telemetry)
        self.retired_reductions = 0  # DCQCN rate cuts of QPs no longer served (telemetry)
        self.qp_flow: dict[int, FlowKey] = {}  # qpn -> the flow it serves (telemetry's labels)
        self.flows: dict[FlowKey, Flow] = {}  # each flow's QPs' totals, live and finished
        # called on this thread after every turn with the time: drivers that post work as
        # completions and memory change (perftest sessions), without a thread hop per message
        self.tickers: list[Callable[[float], None]] = []
        self._cmds: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._halt = threading.Event()

    def call(self, fn: Callable[[], T], timeout: float = 30.0) -> T:
        """Run fn on the data thread and return its result (or raise its exception)."""
        fut: Future[T] = Future()
        self._cmds.put((fn, fut))
        return fut.result(timeout)

    def add(self, qp: QueuePair, peer_ip: str, watch: Watch | None = None,
            local_ip: str | None = None, flow: FlowKey | None = None) -> None:
        """(data thread) Serve a QP (sending from `local_ip`: its rail); its completions
        feed `watch`; `flow`: (name, src, dst) of the flow it serves."""
        if flow is not None:
            self.qp_flow[qp.qpn] = flow
            self.flows.setdefault(flow, Flow())
        self.qps[qp.qpn] = qp
        self.gaps[qp.qpn] = Gap()
        self.peers[qp.qpn] = peer_ip
        self.endpoint.add(qp, peer_ip, local_ip)
        if watch is not None:
            self.watches[qp.qpn] = watch

    def remove(self, qpns: list[int]) -> dict[int, dict[str, Any]]:
        """(data thread) Stop serving QPs; return their final counters."""
        out = {}
        for qpn in qpns:
            qp = self.qps.pop(qpn, None)
            gap = self.gaps.pop(qpn, Gap())
            self.watches.pop(qpn, None)
            self.endpoint.remove(qpn)
            self.peers.pop(qpn, None)
            key = self.qp_flow.pop(qpn, None)
            flow = self.flows.get(key) if key else None
            if qp is not None:
                cuts, counters = reductions(qp), qp.counters.as_dict()
                self.retired_reductions += cuts
                for k, v in counters.items():
                    self.retired[k] = self.retired.get(k, 0) + v
                if flow is not None:
                    flow.retire(counters, cuts)
                out[qpn] = counters | {"max_rx_gap_s": round(gap.max_gap_s, 6),
                                       "dcqcn": getattr(qp, "dcqcn_state", None)}
        return out

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        while not self._halt.is_set():
            self._run_commands()
            mrc = self.mrc.busy  # then RC does not block: MRC's turn may (mrcplane.py)
            self.endpoint.step(max_wait=0.0 if mrc else IDLE_WAIT_S)  # blocks only when idle
            if mrc:
                self.mrc.turn(others_busy=bool(self.qps))
            elif not self.qps:  # idle: count what reached the MRC socket (the engine fuzz)
                self.mrc.endpoint.drain(time.monotonic())
            self._dispatch()
            if self.tickers:
                now = time.monotonic()
                for tick in list(self.tickers):
                    tick(now)
        self.transport.close()
        self.mrc.endpoint.close()

    def _run_commands(self) -> None:
        while True:
            try:
                fn, fut = self._cmds.get_nowait()
            except queue.Empty:
                return
            try:
                fut.set_result(fn())
            except BaseException as e:  # handed back to the calling thread
                fut.set_exception(e)

    def _dispatch(self) -> None:
        now = time.monotonic()
        for qpn, qp in self.qps.items():
            self.gaps[qpn].update(qp.counters.rx_packets, now)
        for qpn, watch in self.watches.items():
            qp = self.qps[qpn]
            for c in qp.completions():
                watch.complete(c.wr_id, c.status)
            if qp.state is QpState.ERROR and not watch.done.is_set():
                watch.fail(f"QP {qpn:#x} failed")
