"""One perftest test run by an engine, as client or server, against any perftest peer.

The engine does what perftest's main() does, step by step (exchange.steps): the
exchange on the TCP socket, QPs and a memory region laid out as perftest lays
them out (so a real client's WRITEs and READs land inside it), the measured
traffic (runners.py) and the report (report.py), printed as perftest prints it.
The QPs, the memory and the clock that drives the traffic are the engine's,
reached through `QueuePairs` (engine.daemon.Engine is one), so this package
never imports the engine that runs it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

from ..errors import EngineError, RocelabError
from ..roce.memory import MemoryRegion
from ..roce.rc import QueuePair
from ..roce.verbs import MAX_RD_ATOMIC, QpConfig
from . import report
from .exchange import BwReport, Dest, Exchange, Step, Test, sizes, steps
from .runners import BwClient, BwServer, ReadLat, Runner, SendLat, WriteLat, buff_size, inc

CYCLE_BUFFER = 4096  # sysconf(_SC_PAGESIZE)
CACHE_LINE = 64  # DEF_CACHE_LINE_SIZE
DEF_ITERS_WB, DEF_ITERS = 5000, 1000
RUN_SLACK_S = 60.0  # a size's traffic may take this long beyond its expected time


@dataclass(frozen=True)
class Options:
    """What `ib_<test>` takes from its command line (the subset the engine runs)."""

    test: Test
    size: int = 0  # 0: perftest's default (65536 for BW, 2 for latency)
    run_all: bool = False  # -a
    iters: int = 0  # -n; 0: perftest's default
    duration: float = 0.0  # -D seconds; 0: iterations
    duplex: bool = False  # -b
    qps: int = 1  # -q
    tclass: int = -1  # --tclass (shown; the engine's DSCP is per host)
    rate_bps: float = 0.0  # --rate_limit, wall bit/s for the whole test (split over QPs)
    mtu: int = 1024  # this end's active path MTU; the exchange takes the smaller
    tx_depth: int = 0  # -t; 0: 128 for BW, 1 for latency

    def __post_init__(self) -> None:
        if not 1 <= self.qps <= 64:
            raise RocelabError(f"-q: 1..64 QPs (got {self.qps})")
        if self.size < 0 or self.size > 1 << 23:
            raise RocelabError(f"-s: 1..8388608 bytes (got {self.size})")
        if self.iters < 0 or self.duration < 0:
            raise RocelabError("-n and -D must be positive")
        if self.iters and self.iters < 5 and not self.test.bw:
            raise RocelabError(f"-n: latency tests need at least 5 iterations (got {self.iters})")
        if self.duration and self.run_all:
            raise RocelabError("-D cannot be used with -a (as in perftest)")
        if self.duplex and not self.test.bw:
            raise RocelabError("-b is for bandwidth tests")

    @property
    def msg_size(self) -> int:
        return self.size or (65536 if self.test.bw else 2)

    @property
    def n_iters(self) -> int:
        return self.iters or (DEF_ITERS_WB if self.test is Test.WRITE_BW else DEF_ITERS)

    @property
    def depth(self) -> int:
        return self.tx_depth or (min(128, self.n_iters) if self.test.bw else 1)

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"test": self.test.value}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Options:
        return cls(**(d | {"test": Test(d["test"])}))


class QueuePairs(Protocol):
    """Where a session's QPs and memory live: the engine of its host (engine.daemon.Engine).
    Each call is safe from the session's thread; ticks run on the engine's data thread."""

    host: str
    ip: str  # the QPs' address: their GID, the peer's destination

    def new_qpns(self, n: int) -> list[dict[str, int]]:
        """n fresh {"qpn", "psn"} pairs."""

    def register(self, buf: bytearray) -> MemoryRegion:
        """`buf` as a memory region the peer may read and write."""

    def deregister(self, mr: MemoryRegion) -> None: ...

    def open_qp(self, cfg: QpConfig, peer_ip: str, rate_bps: float,
                flow: tuple[str, str, str]) -> QueuePair:
        """A QP in RTS towards `peer_ip` with the exchange's `cfg` (the host's own window,
        timers and DCQCN added), paced at `rate_bps` (0: line rate), counted as `flow`."""

    def close_qps(self, qpns: list[int]) -> None: ...

    def ticking(self, tick: Callable[[float], None]) -> AbstractContextManager[None]:
        """Call `tick(now)` on the data thread after every turn while inside."""


class Session:
    """Run `opts` over a connected socket with `host`'s QPs; `run` returns output and figures."""

    def __init__(self, host: QueuePairs, opts: Options, client: bool):
        self.host, self.opts, self.client = host, opts, client
        self.out: list[str] = []
        self.rows: list[report.Row] = []
        self.local: list[Dest] = []
        self.remote: list[Dest] = []
        self.qps: list[QueuePair] = []
        self.mr: MemoryRegion | None = None
        self.buf = bytearray()
        self.mtu = opts.mtu
        self.cycle, self.line = CYCLE_BUFFER, CACHE_LINE
        self.mine: BwReport | None = None
        self.keyed = 0  # key exchanges done: the header follows the second
        self.headed = False

    def run(self, ex: Exchange) -> dict[str, Any]:
        o = self.opts
        sz = sizes(o.msg_size, o.run_all)
        try:
            for step, i in steps(o.test, self.client, o.run_all, o.duplex, bool(o.duration)):
                self._step(ex, step, sz[i])
        finally:
            self._release()
        return {"test": o.test.value, "role": "client" if self.client else "server",
                "peer": self.remote[0].ipv4 if self.remote else None, "mtu": self.mtu,
                "peer_version": ex.peer_version, "output": "".join(self.out),
                "rows": [report.to_json(r) for r in self.rows]}

    def _step(self, ex: Exchange, step: Step, size: int) -> None:
        self._connection_step(ex, step)
        if self.keyed == 2 and not self.headed and step is not Step.KEYS:
            self.headed = True  # after the QPs' addresses, as the mains print it
            self.out.append(report.addresses(self.opts.test, self.local, self.remote)
                            + report.header(self.opts.test, bool(self.opts.duration)))
        self._measure_step(ex, step, size)

    def _connection_step(self, ex: Exchange, step: Step) -> None:
        """The steps up to the traffic: the exchange, the QPs and the banner."""
        o = self.opts
        if step is Step.VERSIONS:
            ex.versions()
        elif step is Step.SYS:
            self.cycle, self.line = ex.sys_data(self.cycle, self.line)
        elif step is Step.MTU:
            self.mtu = ex.mtu(o.mtu)
        elif step is Step.SETUP:
            self._setup()
            self.out.append(report.banner(o.test, qps=o.qps, mtu=self.mtu, duplex=o.duplex,
                                          tx_depth=o.depth, out_reads=self.local[0].out_reads,
                                          tos=o.tclass))
        elif step is Step.KEYS:
            self.remote = [ex.keys(d) for d in self.local]
            self.keyed += 1
        elif step is Step.CONNECT:
            self._connect()
        elif step is Step.SYNC:
            ex.keys(self.local[0])

    def _measure_step(self, ex: Exchange, step: Step, size: int) -> None:
        """The traffic, the reports and the end, each closing the output as perftest does."""
        if step is Step.RUN:
            self._run(size)
        elif step is Step.REPORTS:
            self._reports(ex)
        elif step is Step.CLOSE:
            self.out.append(report.RESULT_LINE)
            ex.close(self.local[0])
        elif step is Step.END and not self.out[-1] == report.RESULT_LINE:
            self.out.append(report.RESULT_LINE)

    def _reports(self, ex: Exchange) -> None:
        """xchg_bw_reports: the half-duplex server prints the client's row, duplex the sum."""
        o = self.opts
        mine = self.mine or BwReport(o.msg_size, 0, 0.0, 0.0, 0.0)
        theirs = ex.reports(mine)
        if not o.duplex and not self.client:  # the half-duplex server prints the client's
            self._row(report.BwRow(theirs.size, theirs.iters, theirs.bw_peak, theirs.bw_avg,
                                   theirs.msg_rate))
        elif o.duplex:  # both directions summed
            self.rows[-1] = row = report.BwRow(mine.size, mine.iters,
                                               mine.bw_peak + theirs.bw_peak,
                                               mine.bw_avg + theirs.bw_avg,
                                               mine.msg_rate + theirs.msg_rate)
            self.out[-1] = report.bw_row(row)

    # -- resources ------------------------------------------------------------

    def _setup(self) -> None:
        """alloc_ctx + create_mr + set_up_connection: one buffer, two halves (send, receive)
        of a slot per QP; each QP offers the peer its receive slot."""
        o, h = self.opts, self.host
        biggest = max(sizes(o.msg_size, o.run_all))
        slot = buff_size(biggest, self.cycle)
        self.buf = bytearray(os.urandom(inc(slot, self.line) * 2 * o.qps)) \
            if o.test is not Test.WRITE_LAT else bytearray(inc(slot, self.line) * 2 * o.qps)
        mr = self.mr = h.register(self.buf)
        out_reads = MAX_RD_ATOMIC if o.test.verb == "read" else 1
        self.local = [Dest.for_ipv4(h.ip, qpn=q["qpn"], psn=q["psn"], rkey=mr.rkey,
                                    vaddr=mr.va + (o.qps + i) * slot, out_reads=out_reads)
                      for i, q in enumerate(h.new_qpns(o.qps))]

    def _connect(self) -> None:
        """ctx_connect: the QPs to RTS with the peer's QPN, PSN and address (from its GID)."""
        o = self.opts
        biggest = max(sizes(o.msg_size, o.run_all))
        flow = ("perftest", self.host.host, self.remote[0].ipv4)
        for mine, theirs in zip(self.local, self.remote):
            cfg = QpConfig(qpn=mine.qpn, remote_qpn=theirs.qpn, send_psn=mine.psn,
                           recv_psn=theirs.psn, mtu=self.mtu, max_send=max(65536, biggest),
                           # as perftest's ctx_modify_qp_to_rts/rtr: ORD from the peer's
                           # out_reads (its IRD), IRD what this side advertised
                           max_rd_atomic=max(1, min(MAX_RD_ATOMIC, theirs.out_reads or 1)),
                           max_dest_rd_atomic=max(1, mine.out_reads))
            self.qps.append(self.host.open_qp(cfg, theirs.ipv4, o.rate_bps / o.qps, flow))

    def _release(self) -> None:
        if self.qps:
            self.host.close_qps([q.qpn for q in self.qps])
        if self.mr is not None:
            self.host.deregister(self.mr)

    # -- traffic --------------------------------------------------------------

    def _run(self, size: int) -> None:
        o = self.opts
        runner = self._runner(size)
        expect = o.duration or max(1.0, o.n_iters * o.qps * size * 8 / 1e8)
        self._drive(runner, expect + RUN_SLACK_S)
        row: report.Row
        if o.test.bw:
            bw = self._bw_row(runner, size)
            row = bw
            self.mine = BwReport(bw.size, bw.iters, bw.bw_peak, bw.bw_avg, bw.msg_rate)
        else:
            rtt = 1 if o.test.verb == "read" else 2
            if o.duration:
                n = max(len(runner.posted), 1)
                span = (runner.posted[-1] - runner.posted[0]) if len(runner.posted) > 1 else 0.0
                row = report.LatDurRow(size, n, span * 1e6 / rtt / n, n / max(span, 1e-9))
            else:
                row = report.lat_figures(size, runner.posted, rtt)
        self._row(row)

    def _row(self, row: report.Row) -> None:
        self.rows.append(row)
        self.out.append(report.bw_row(row) if isinstance(row, report.BwRow)
                        else report.lat_row(row))

    def _runner(self, size: int) -> Runner:
        o, view = self.opts, memoryview(self.buf)
        start = time.monotonic()
        until = start + o.duration if o.duration else None
        margin = o.duration / 4
        window = (start + margin, start + o.duration - margin) if o.duration else None
        sends_back = o.test.bw and (self.client or o.duplex)
        if o.test is Test.SEND_BW and not sends_back:
            return BwServer(self.qps, view, size, expected=o.n_iters * o.qps, until=until,
                            window=window)
        if o.test.bw:
            return BwClient(self.qps, view, size, verb=o.test.verb, remote=self.remote,
                            iters=o.n_iters, tx_depth=o.depth, cycle_buffer=self.cycle,
                            cache_line=self.line, until=until, window=window)
        if o.test is Test.WRITE_LAT:
            return WriteLat(self.qps, view, size, remote=self.remote[0],
                            recv_offset=o.qps * buff_size(max(sizes(o.msg_size, o.run_all)),
                                                          self.cycle),
                            iters=o.n_iters, server=not self.client, until=until)
        if o.test is Test.READ_LAT:
            return ReadLat(self.qps, view, size, remote=self.remote[0], iters=o.n_iters,
                           until=until)
        return SendLat(self.qps, view, size, iters=o.n_iters, server=not self.client,
                       until=until)

    def _drive(self, runner: Runner, timeout_s: float) -> None:
        with self.host.ticking(runner.tick):
            if not runner.done.wait(timeout_s):
                runner.fail(f"not finished within {timeout_s:.0f} s")
        if runner.error:
            raise EngineError(f"perftest {self.opts.test.value}: {runner.error}")

    def _bw_row(self, runner: Runner, size: int) -> report.BwRow:
        o = self.opts
        if o.duration:
            n = getattr(runner, "sampled", 0)
            span = max(o.duration / 2, 1e-9)
            return report.BwRow(size, n, 0.0, size * n / span / report.MB, n / span / 1e6)
        if isinstance(runner, BwServer):  # noPeak: first arrival to last
            return replace(report.bw_figures(size, runner.posted * len(runner.completed),
                                             runner.completed, peak=False), bw_peak=0.0)
        return report.bw_figures(size, runner.posted, runner.completed, cq_mod=min(100, o.depth))
