"""A full-snaplen pcap of one port of one node, taken inside the node's namespace.

tcpdump runs in the node's namespace (spawned from a thread that entered it,
like the FRR daemons), tagged with the lab, and writes the pcap to a pipe
(`-w -`, packet-buffered with -U). We copy the stream to the caller's sink
(a file, or stdout for `| wireshark -k -i -`) and count the records as they
pass, so the summary is what the sink received. It stops after `count`
packets (tcpdump's own -c), after `duration_s` (SIGTERM to its PID; it
flushes and exits), on Ctrl-C (the same), or when the reader of a pipe
goes away (`| head -c`, wireshark closed); 0 means no limit for either.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .. import netns
from ..errors import RocelabError
from ..plan import Interface, Node, Plan
from ..procs import base_env, kill_pids
from . import lookup

MRC_DISSECTOR = Path(__file__).with_name("mrc.lua")  # Wireshark Lua dissector for MRC packets
DEFAULT_COUNT = 100
DEFAULT_DURATION_S = 10.0
START_TIMEOUT_S = 10.0  # tcpdump says "listening on" within milliseconds
STOP_TIMEOUT_S = 5.0  # after SIGTERM: flush and exit, else SIGKILL
TICK_S = 0.2  # how often progress is reported while packets flow
PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">",  # microsecond timestamps
               b"\x4d\x3c\xb2\xa1": "<", b"\xa1\xb2\x3c\x4d": ">"}  # nanosecond timestamps
GLOBAL_HEADER = 24
RECORD_HEADER = 16

Tick = Callable[[int, int], None]  # (packets, bytes written so far)


def default_path(lab: str, node: str, port: str) -> str:
    return f"{lab}-{node}-{port}.pcap"


CAPTURE_BUFFER_KIB = 32768


def tcpdump_argv(port: str, count: int, bpf: str | None) -> list[str]:
    """tcpdump on one port: whole frames, pcap on stdout flushed per packet, no name lookups,
    and a kernel buffer (-B, KiB) that holds a burst of jumbo frames while two busy cores
    get round to tcpdump (the 2 MiB default dropped most of a 1 MiB transfer)."""
    argv = ["tcpdump", "-i", port, "-s", "0", "-B", str(CAPTURE_BUFFER_KIB), "-U",
            "--immediate-mode", "-n", "-w", "-"]
    if count:
        argv += ["-c", str(count)]
    if bpf and bpf.strip():
        # after `--`: a filter that starts with `-` ("-w /etc/x") is an expression tcpdump
        # refuses, never an option; one argument (tcpdump joins the rest into the expression)
        argv += ["--", bpf]
    return argv


class PcapCounter:
    """Counts complete records in a pcap byte stream fed in arbitrary chunks (pure)."""

    def __init__(self) -> None:
        self.packets = 0
        self.bytes = 0  # everything fed so far
        self._endian: str | None = None
        self._pending = b""  # an incomplete header carried to the next chunk
        self._skip = 0  # bytes of the current record's data still to come

    def feed(self, data: bytes) -> int:
        """Account for `data`; return the number of records completed by it."""
        self.bytes += len(data)
        before = self.packets
        buf = self._pending + data
        self._pending = b""
        pos = 0
        if self._endian is None:
            if len(buf) < GLOBAL_HEADER:
                self._pending = buf
                return 0
            endian = PCAP_MAGICS.get(buf[:4])
            if endian is None:
                raise ValueError(f"not a pcap stream (magic {buf[:4].hex()})")
            self._endian, pos = endian, GLOBAL_HEADER
        while pos < len(buf):
            if self._skip:
                step = min(self._skip, len(buf) - pos)
                self._skip -= step
                pos += step
                if not self._skip:
                    self.packets += 1
                continue
            if len(buf) - pos < RECORD_HEADER:
                self._pending = buf[pos:]
                break
            (incl_len,) = struct.unpack_from(self._endian + "I", buf, pos + 8)
            pos += RECORD_HEADER
            if incl_len == 0:
                self.packets += 1
            self._skip = incl_len
        return self.packets - before

    @property
    def partial(self) -> bool:
        """A record (or header) has started but not finished."""
        return bool(self._pending or self._skip)


def parse_stats(stderr: str) -> dict[str, int]:
    """tcpdump's closing lines: {'captured': N, 'received by filter': N, 'dropped by kernel': N}."""
    return {m.group(2): int(m.group(1))
            for m in re.finditer(r"^(\d+) packets? (captured|received by filter|dropped by kernel)",
                                 stderr, re.MULTILINE)}


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "no message"


@dataclass
class CaptureResult:
    lab: str
    node: str
    port: str
    packets: int
    bytes: int
    seconds: float  # from tcpdump listening to its exit
    stopped: str  # "count", "duration", "interrupted", "reader closed", "tcpdump exited"
    dropped_by_kernel: int
    filter: str | None


def target(plan: Plan, node: str, port: str) -> tuple[Node, Interface]:
    """The node and port to capture on; NodeNotFoundError (exit 4) naming the valid ones."""
    found, iface = lookup.port(plan, node, port)
    if not netns.exists(found.netns):
        raise RocelabError(f"namespace {found.netns} of {node} is missing: is lab {plan.lab} "
                           f"whole? (`rocelab status {plan.lab}`)")
    return found, iface


def _spawn(plan: Plan, node: Node, argv: list[str]) -> subprocess.Popen[bytes]:
    try:
        with netns.entered(node.netns):  # the child inherits this thread's namespace
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=base_env(plan.lab),
                                    start_new_session=True)  # Ctrl-C reaches us; we stop it by PID
    except FileNotFoundError:
        raise RocelabError("tcpdump is not installed: run `make setup`") from None


class _Session:
    """One tcpdump run: its two pipes multiplexed until both close, with the stop rules."""

    def __init__(self, proc: subprocess.Popen[bytes], open_sink: Callable[[], BinaryIO],
                 duration_s: float, tick: Tick):
        self.proc, self.open_sink, self.duration_s, self.tick = proc, open_sink, duration_s, tick
        self.counter = PcapCounter()
        self.stderr = b""
        self.early = b""  # pcap bytes before tcpdump says it listens (its header)
        self.sink: BinaryIO | None = None
        self.t_listen: float | None = None
        self.deadline = time.monotonic() + START_TIMEOUT_S  # until listening; then the capture's
        self.stopped = "tcpdump exited"
        self.signalled = False
        self.last_tick = 0.0

    def stop(self, why: str) -> None:
        """SIGTERM to the tcpdump we started (by PID); it flushes and exits; keep draining."""
        if not self.signalled:
            self.stopped, self.signalled = why, True
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            self.deadline = time.monotonic() + STOP_TIMEOUT_S

    def run(self) -> None:
        assert self.proc.stdout is not None and self.proc.stderr is not None
        out_fd, err_fd = self.proc.stdout.fileno(), self.proc.stderr.fileno()
        open_fds = [out_fd, err_fd]
        while open_fds:
            try:
                wait = max(0.0, self.deadline - time.monotonic()) if self.deadline else None
                ready, _, _ = select.select(open_fds, [], [], wait)
                if not ready:
                    if self.signalled:
                        return  # it ignored SIGTERM: the caller kills it
                    self.stop("duration" if self.t_listen is not None else "start timeout")
                for fd in ready:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        open_fds.remove(fd)
                    elif fd == err_fd:
                        self._said(chunk)
                    else:
                        self._pcap(chunk)
            except KeyboardInterrupt:  # Ctrl-C ends a capture as it ends tcpdump: keep what came
                if self.signalled:
                    raise
                self.stop("interrupted")

    def _said(self, chunk: bytes) -> None:
        self.stderr += chunk
        if self.t_listen is None and b"listening on" in self.stderr:
            self.t_listen = time.monotonic()
            self.deadline = self.t_listen + self.duration_s if self.duration_s else 0.0
            self.sink = self.open_sink()
            early, self.early = self.early, b""
            if early:
                self._pcap(early)

    def _pcap(self, chunk: bytes) -> None:
        if self.sink is None:
            self.early += chunk
            return
        if self.stopped == "reader closed":
            return
        try:
            self.sink.write(chunk)
            self.sink.flush()  # a reader at the other end of a pipe sees each packet
        except BrokenPipeError:  # `| wireshark` closed, `| head -c`: nobody reads any more
            self.stop("reader closed")
            return
        self.counter.feed(chunk)
        if time.monotonic() - self.last_tick >= TICK_S:
            self.last_tick = time.monotonic()
            self.tick(self.counter.packets, self.counter.bytes)


def capture(plan: Plan, node: str, port: str, open_sink: Callable[[], BinaryIO],
            count: int = DEFAULT_COUNT, duration_s: float = DEFAULT_DURATION_S,
            bpf: str | None = None, tick: Tick = lambda _p, _b: None) -> CaptureResult:
    """Capture on `node`'s `port` until `count` packets or `duration_s` seconds (0: no limit).

    `open_sink` is called once tcpdump is listening (packets from then on are
    captured), so a capture that cannot start (a bad filter) creates no file
    and truncates none; the pcap goes there. `tick` gets the running totals
    as packets arrive. RocelabError if tcpdump
    cannot start (its own message, e.g. the filter's syntax error) or dies.
    """
    if count < 0 or duration_s < 0:
        raise RocelabError(f"--count and --duration must be 0 (no limit) or more "
                           f"(got {count}, {duration_s:g})")
    found, _ = target(plan, node, port)
    proc = _spawn(plan, found, tcpdump_argv(port, count, bpf))
    session = _Session(proc, open_sink, duration_s, tick)
    try:
        session.run()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(STOP_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            kill_pids([proc.pid], plan.lab)
        for pipe in (proc.stdout, proc.stderr):
            if pipe:
                pipe.close()
    rc, text, where = proc.returncode, session.stderr.decode(errors="replace"), f"{node}:{port}"
    if session.t_listen is None:
        why = (f"did not start listening within {START_TIMEOUT_S:g} s"
               if session.stopped == "start timeout" else f"failed (exit {rc})")
        raise RocelabError(f"tcpdump on {where} in lab {plan.lab} {why}: {_last_line(text)}")
    if rc != 0 and not session.signalled:
        raise RocelabError(f"tcpdump on {where} in lab {plan.lab} exited with status {rc} after "
                           f"{session.counter.packets} packets: {_last_line(text)}")
    packets = session.counter.packets
    stopped = "count" if session.stopped == "tcpdump exited" and count and packets >= count \
        else session.stopped
    tick(packets, session.counter.bytes)
    return CaptureResult(plan.lab, node, port, packets, session.counter.bytes,
                         round(time.monotonic() - session.t_listen, 3), stopped,
                         parse_stats(text).get("dropped by kernel", 0), bpf)
