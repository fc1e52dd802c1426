"""The measured traffic of one message size, driven from the engine's data thread.

Each runner is a `tick(now)` the data plane calls after every turn: it drains
its QPs' completions, posts what perftest's loop would post next, and stamps
the times perftest stamps (tposted/tcompleted), so report.py computes the
same figures. Sources: run_iter_bw, run_iter_bw_server, run_iter_lat_write,
run_iter_lat and run_iter_lat_send in perftest_resources.c.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..roce.rc import QueuePair
from ..roce.verbs import WcStatus, WrKind
from .exchange import Dest


def inc(size: int, cache_line: int) -> int:
    """INC(): the address step between messages, a whole number of cache lines."""
    return -(-size // cache_line) * cache_line if size > cache_line else cache_line


def buff_size(size: int, cycle_buffer: int) -> int:
    """BUFF_SIZE(): each QP's half of the buffer is at least a cycle buffer."""
    return max(size, cycle_buffer)


@dataclass
class Runner:
    """Common state: the QPs, the buffer, the outcome."""

    qps: list[QueuePair]
    buf: memoryview
    size: int
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None
    posted: list[float] = field(default_factory=list)
    completed: list[float] = field(default_factory=list)

    def fail(self, why: str) -> None:
        if self.error is None:
            self.error = why
        self.done.set()

    def tick(self, now: float) -> None:
        raise NotImplementedError


@dataclass
class BwRunner(Runner):
    """The bandwidth tests' common part: -D's end and sample window, and completions."""

    until: float | None = None  # -D: post until then (a time on the data thread's clock)
    window: tuple[float, float] | None = None  # -D: the sample window
    sampled: int = 0

    def _completed(self, now: float) -> None:
        self.completed.append(now)
        if self.window and self.window[0] <= now <= self.window[1]:
            self.sampled += 1


@dataclass
class BwClient(BwRunner):
    """run_iter_bw: keep tx_depth messages outstanding on every QP; WRITE/READ addresses
    walk the peer's cycle buffer in INC steps when the message fits half of it."""

    verb: str = "write"
    remote: list[Dest] = field(default_factory=list)
    iters: int = 1000
    tx_depth: int = 128
    cycle_buffer: int = 4096
    cache_line: int = 64

    def __post_init__(self) -> None:
        n = len(self.qps)
        self.scnt, self.ccnt = [0] * n, [0] * n
        self.rem = [d.vaddr for d in self.remote]
        self.slot = buff_size(self.size, self.cycle_buffer)

    def tick(self, now: float) -> None:
        if self.done.is_set():
            return
        timed = self.until is not None
        for i, qp in enumerate(self.qps):
            for c in qp.completions():
                if c.kind is WrKind.RECV:
                    continue  # duplex SEND: the peer's messages
                if c.status is not WcStatus.SUCCESS:
                    self.fail(f"QP {qp.qpn:#x} message {self.ccnt[i]}: {c.status.value}")
                    return
                self.ccnt[i] += 1
                self._completed(now)
            stop = timed and now >= self.until  # type: ignore[operator]
            while not stop and (timed or self.scnt[i] < self.iters) \
                    and self.scnt[i] - self.ccnt[i] < self.tx_depth:
                self._post(i, qp)
                self.posted.append(now)
        total = sum(self.ccnt)
        if timed:
            if now >= self.until and total == sum(self.scnt):  # type: ignore[operator]
                self.done.set()
        elif total >= self.iters * len(self.qps):
            self.done.set()

    def _post(self, i: int, qp: QueuePair) -> None:
        local = self.buf[i * self.slot:i * self.slot + self.size]
        k, d = self.scnt[i], self.remote[i] if self.remote else None
        if self.verb == "write":
            qp.post_write(k, local, self.rem[i], d.rkey)  # type: ignore[union-attr]
        elif self.verb == "read":
            qp.post_read(k, local, self.rem[i], d.rkey)  # type: ignore[union-attr]
        else:
            qp.post_send(k, local)
        if self.verb != "send" and self.size <= self.cycle_buffer // 2:
            step = inc(self.size, self.cache_line)
            self.rem[i] += step
            if (k + 1) % (self.cycle_buffer // step) == 0:
                self.rem[i] = self.remote[i].vaddr
        self.scnt[i] = k + 1


@dataclass
class BwServer(BwRunner):
    """run_iter_bw_server (send_bw): count the peer's SENDs, first arrival to last."""

    expected: int = 1000

    def tick(self, now: float) -> None:
        if self.done.is_set():
            return
        for qp in self.qps:
            for c in qp.completions():
                if c.kind is not WrKind.RECV:
                    continue
                if c.status is not WcStatus.SUCCESS:
                    self.fail(f"QP {qp.qpn:#x}: receive failed: {c.status.value}")
                    return
                if not self.posted:
                    self.posted.append(now)
                self._completed(now)
        if self.until is not None:
            if now >= self.until:
                self.done.set()
        elif len(self.completed) >= self.expected:
            self.done.set()


@dataclass
class LatRunner(Runner):
    """The latency tests' common part: `iters` round trips, or until `until` (-D);
    scnt/ccnt/rcnt count posts, completions and the peer's messages seen."""

    iters: int = 1000
    until: float | None = None

    def __post_init__(self) -> None:
        self.scnt = self.ccnt = self.rcnt = 0

    def _more(self, count: int, now: float) -> bool:
        return now < self.until if self.until is not None else count < self.iters

    def _reap(self, verb: str | None) -> bool:
        """Count the QP's completions (ours in ccnt, the peer's SENDs in rcnt); False once
        one failed, which ends the run naming `verb` and our count (None: its own kind)."""
        qp = self.qps[0]
        for c in qp.completions():
            if c.status is not WcStatus.SUCCESS:
                what = f"{verb} {self.ccnt}" if verb else c.kind.value
                self.fail(f"QP {qp.qpn:#x}: {what}: {c.status.value}")
                return False
            if c.kind is WrKind.RECV:
                self.rcnt += 1
            else:
                self.ccnt += 1
        return True


@dataclass
class WriteLat(LatRunner):
    """run_iter_lat_write: ping-pong by RDMA WRITE; each side polls the last byte of
    its receive slot for the peer's count; the server sends first."""

    remote: Dest | None = None
    recv_offset: int = 0  # where the peer writes: (qps) * BUFF_SIZE
    server: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self.phase = "rx"

    def tick(self, now: float) -> None:
        if not self._reap("write"):
            return
        qp = self.qps[0]
        while not self.done.is_set():
            if self.phase == "rx":
                if self._more(self.rcnt, now) and not (self.scnt < 1 and self.server):
                    if self.buf[self.recv_offset + self.size - 1] != (self.rcnt + 1) & 0xFF:
                        return
                    self.rcnt += 1
                self.phase = "tx"
            if self.phase == "tx":
                if self._more(self.scnt, now):
                    self.posted.append(now)
                    self.scnt += 1
                    self.buf[self.size - 1] = self.scnt & 0xFF
                    d = self.remote
                    qp.post_write(self.scnt, self.buf[:self.size], d.vaddr, d.rkey)  # type: ignore[union-attr]
                self.phase = "cq"
            if self.phase == "cq":
                if self.ccnt < self.scnt:
                    return
                self.phase = "rx"
                if not (self._more(self.scnt, now) or self._more(self.rcnt, now)
                        or self.ccnt < self.scnt):
                    self.done.set()


@dataclass
class ReadLat(LatRunner):
    """run_iter_lat: one READ at a time; the time between posts is the round trip."""

    remote: Dest | None = None

    def tick(self, now: float) -> None:
        if not self._reap("read") or self.ccnt < self.scnt or self.done.is_set():
            return
        if self._more(self.scnt, now):
            self.posted.append(now)
            self.scnt += 1
            d = self.remote
            self.qps[0].post_read(self.scnt, self.buf[:self.size], d.vaddr, d.rkey)  # type: ignore[union-attr]
        else:
            self.done.set()


@dataclass
class SendLat(LatRunner):
    """run_iter_lat_send: ping-pong by SEND; the client sends first."""

    server: bool = False

    def tick(self, now: float) -> None:
        if not self._reap(None) or self.done.is_set():
            return
        must_rx = self._more(self.rcnt, now) and not (self.scnt < 1 and not self.server)
        # wait for the peer's message number scnt (the one answering our last) first
        if must_rx and self.rcnt < self.scnt + (1 if self.server else 0):
            return
        if self._more(self.scnt, now):
            if self.ccnt < self.scnt:
                return
            self.posted.append(now)
            self.scnt += 1
            self.qps[0].post_send(self.scnt, self.buf[:self.size])
        elif self.ccnt >= self.scnt and (self.until is not None or self.rcnt >= self.iters):
            self.done.set()
