"""perftest's "Ethernet" exchange (TCP 18515, no rdma_cm), as 4.5-0.17 does it for RC.

Every message is a fixed-size `ctx_xchg_data`: the client (the side given a
server name) writes then reads, the server reads then writes, both the same
number of bytes. `steps` lists the sequence of a test's main() for one role;
`Exchange` runs one step at a time over a connected blocking socket.
Sources: src/perftest_communication.c (establish_connection, exchange_versions,
check_sys_data, check_mtu, ctx_hand_shake, xchg_bw_reports, ctx_close_connection)
and the six mains (write_bw.c, read_bw.c, send_bw.c, write_lat.c, read_lat.c,
send_lat.c).
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from ..errors import EngineError

PORT = 18515  # DEF_PORT
VERSION = "6.06"  # what Debian's perftest 4.5+0.17 sends (`ib_write_bw --version`); >= 5.70 passes
MAX_VERSION = 16  # version field, NUL-padded
KEY_MSG_SIZE = 59  # KEY_PRINT_FMT, gid_index == -1 (never on RoCE: check_link sets index 0)
KEY_MSG_SIZE_GID = 108  # KEY_PRINT_FMT_GID, 107 characters and the NUL
DONE = b"done\0"  # ctx_close_connection's last write (sizeof "done")
MAX_POW = 24  # -a: sizes 2**1 .. 2**23 (RC)
IB_MTUS = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}  # enum ibv_mtu


class Test(str, Enum):
    WRITE_BW = "write_bw"
    READ_BW = "read_bw"
    SEND_BW = "send_bw"
    WRITE_LAT = "write_lat"
    READ_LAT = "read_lat"
    SEND_LAT = "send_lat"

    @property
    def verb(self) -> str:
        return self.value.split("_")[0]

    @property
    def bw(self) -> bool:
        return self.value.endswith("_bw")


@dataclass(frozen=True)
class Dest:
    """struct pingpong_dest as it crosses the wire (one QP's keys)."""

    qpn: int
    psn: int
    rkey: int
    vaddr: int
    gid: bytes = bytes(16)
    lid: int = 0
    out_reads: int = 1
    srqn: int = 0

    @classmethod
    def for_ipv4(cls, ip: str, **kw: int) -> Dest:
        """A RoCEv2 IPv4 GID: ::ffff:a.b.c.d."""
        return cls(gid=ipaddress.IPv6Address(f"::ffff:{ip}").packed, **kw)

    @property
    def ipv4(self) -> str:
        mapped = ipaddress.IPv6Address(self.gid).ipv4_mapped
        if mapped is None:
            raise EngineError(f"peer GID {ipaddress.IPv6Address(self.gid)} is not an IPv4 "
                              "RoCEv2 GID (::ffff:a.b.c.d): the engine speaks IPv4 only")
        return str(mapped)

    def encode(self) -> bytes:
        """KEY_PRINT_FMT_GID, with its terminating NUL (108 bytes)."""
        text = (f"{self.lid:04x}:{self.out_reads:04x}:{self.qpn:06x}:{self.psn:06x}:"
                f"{self.rkey:08x}:{self.vaddr:016x}:" + "".join(f"{b:02x}:" for b in self.gid)
                + f"{self.srqn:08x}:")
        raw = text.encode() + b"\0"
        if len(raw) != KEY_MSG_SIZE_GID:
            raise EngineError(f"a perftest key message must be {KEY_MSG_SIZE_GID} bytes, "
                              f"not {len(raw)} (a field overflowed: {text})")
        return raw

    @classmethod
    def decode(cls, raw: bytes) -> Dest:
        """ethernet_read_keys: colon-separated hex fields (strtol, so widths may vary)."""
        fields = raw.split(b"\0", 1)[0].decode("ascii", "replace").split(":")
        try:
            lid, out_reads, qpn, psn, rkey, vaddr = (int(f, 16) for f in fields[:6])
            gid = bytes(int(f, 16) & 0xFF for f in fields[6:22])
            srqn = int(fields[22], 16) if len(fields) > 22 and fields[22] else 0
        except ValueError:
            raise EngineError(f"bad perftest key message {raw[:KEY_MSG_SIZE_GID]!r}") from None
        if len(gid) != 16:
            raise EngineError(f"perftest key message without a GID: {raw!r}")
        return cls(qpn, psn, rkey, vaddr, gid, lid, out_reads, srqn)


@dataclass(frozen=True)
class BwReport:
    """struct bw_report_data as xchg_bw_reports sends it (peer version >= 5.33)."""

    size: int
    iters: int
    bw_peak: float
    bw_avg: float
    msg_rate: float


def encode_version(version: str = VERSION) -> bytes:
    raw = version.encode()[:MAX_VERSION - 1]
    return raw + bytes(MAX_VERSION - len(raw))


def version_number(raw: bytes) -> float:
    """atof(rem_version): the leading number, 0.0 if none."""
    text = raw.split(b"\0", 1)[0].decode("ascii", "replace")
    num = ""
    for ch in text:
        if not (ch.isdigit() or (ch == "." and "." not in num)):
            break
        num += ch
    try:
        return float(num)
    except ValueError:
        return 0.0


def encode_mtu(mtu: int) -> bytes:
    """check_mtu: sprintf("%d", enum ibv_mtu), 2 bytes sent (peer version >= 5.31)."""
    return f"{IB_MTUS[mtu]}".encode()[:1] + b"\0"


def decode_mtu(raw: bytes) -> int | None:
    """The path MTU in bytes the peer's enum names, None if not a valid one."""
    try:
        enum = int(raw.split(b"\0", 1)[0])
    except ValueError:
        return None
    return next((m for m, e in IB_MTUS.items() if e == enum), None)


class Step(str, Enum):
    """One stage of a test's main(); `EXCHANGE` stages move bytes on the socket."""

    VERSIONS = "versions"  # exchange_versions + check_version_compatibility
    SYS = "sys"  # check_sys_data: cycle_buffer, cache_line_size
    MTU = "mtu"  # check_mtu
    SETUP = "setup"  # (local) create QPs and the memory region: before the keys
    KEYS = "keys"  # ctx_hand_shake of every QP's keys
    CONNECT = "connect"  # (local) QPs to RTR/RTS with the peer's keys
    SYNC = "sync"  # ctx_hand_shake of QP 0's keys: a barrier
    RUN = "run"  # (local) the measured traffic of one message size
    REPORTS = "reports"  # xchg_bw_reports
    CLOSE = "close"  # ctx_close_connection: a sync, then "done"
    END = "end"  # (local) the process exits: the socket closes


def sizes(size: int, run_all: bool) -> list[int]:
    return [1 << i for i in range(1, MAX_POW)] if run_all else [size]


def steps(test: Test, client: bool, run_all: bool = False, duplex: bool = False,
          duration: bool = False) -> list[tuple[Step, int]]:
    """The sequence of `test`'s main() for one role: (step, size index) pairs, the index
    into `sizes(...)` for RUN (and the syncs and reports around it), else 0."""
    main = _Main(client, MAX_POW - 1 if run_all else 1, run_all, duplex, duration)
    head = [(Step.VERSIONS, 0), (Step.SYS, 0), (Step.MTU, 0), (Step.SETUP, 0)]
    return head + _AFTER_SETUP[test](main)


@dataclass(frozen=True)
class _Main:
    """How one main() was started: its role and the flags that shape its sequence."""

    client: bool
    n: int  # message sizes: 23 with -a, else 1
    run_all: bool
    duplex: bool
    duration: bool


_CLOSE = ((Step.CLOSE, 0), (Step.END, 0))  # ctx_close_connection, then exit


def _rdma_bw(m: _Main) -> list[tuple[Step, int]]:
    """write_bw.c and read_bw.c: only the client (or both, duplex) runs traffic."""
    s = [(Step.KEYS, 0), (Step.CONNECT, 0), (Step.KEYS, 0), (Step.SYNC, 0)]
    if not m.client and not m.duplex:  # the server just waits for the client to finish
        return [*s, (Step.SYNC, 0), (Step.REPORTS, 0), *_CLOSE]
    for i in range(m.n):
        if m.duplex:
            s.append((Step.SYNC, i))
        s.append((Step.RUN, i))
        if m.duplex and m.run_all:  # "version >= 4.6": every 4.x-6.x build
            s.append((Step.SYNC, i))
        if m.duplex:
            s.append((Step.REPORTS, i))
    if m.client and not m.duplex:
        s += [(Step.SYNC, 0), (Step.REPORTS, 0)]
    return [*s, *_CLOSE]


def _send_bw(m: _Main) -> list[tuple[Step, int]]:
    s = [(Step.KEYS, 0), (Step.CONNECT, 0), (Step.SYNC, 0), (Step.KEYS, 0)]
    for i in range(m.n):
        s += [(Step.SYNC, i), (Step.RUN, i)]
        if m.duplex and not m.duration:
            s.append((Step.REPORTS, i))
        if m.run_all:
            s.append((Step.SYNC, i))
    return [*s, *_CLOSE]


def _write_lat(m: _Main) -> list[tuple[Step, int]]:
    s = [(Step.SYNC, 0), (Step.KEYS, 0), (Step.CONNECT, 0), (Step.KEYS, 0), (Step.SYNC, 0)]
    return s + [(Step.RUN, i) for i in range(m.n)] + [(Step.END, 0)]  # no close: exit


def _read_lat(m: _Main) -> list[tuple[Step, int]]:
    s = [(Step.SYNC, 0), (Step.KEYS, 0), (Step.CONNECT, 0), (Step.KEYS, 0), (Step.SYNC, 0)]
    if not m.client:  # only the client posts READs
        return [*s, *_CLOSE]
    return s + [(Step.RUN, i) for i in range(m.n)] + [*_CLOSE]


def _send_lat(m: _Main) -> list[tuple[Step, int]]:
    s = [(Step.KEYS, 0), (Step.CONNECT, 0), (Step.SYNC, 0), (Step.KEYS, 0)]
    for i in range(m.n):
        s += [(Step.SYNC, i), (Step.RUN, i)]
    return [*s, *_CLOSE]


_AFTER_SETUP: dict[Test, Callable[[_Main], list[tuple[Step, int]]]] = {
    Test.WRITE_BW: _rdma_bw, Test.READ_BW: _rdma_bw, Test.SEND_BW: _send_bw,
    Test.WRITE_LAT: _write_lat, Test.READ_LAT: _read_lat, Test.SEND_LAT: _send_lat}


class Exchange:
    """The fixed-size messages of one perftest connection, as one side of it."""

    def __init__(self, sock: socket.socket, client: bool, timeout_s: float = 60.0):
        self.sock, self.client = sock, client
        sock.settimeout(timeout_s)
        if sock.family in (socket.AF_INET, socket.AF_INET6):  # small messages, no Nagle delay
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.peer_version = 0.0

    def xchg(self, mine: bytes) -> bytes:
        """ctx_xchg_data_ethernet: the client writes first, the server reads first."""
        if self.client:
            self._write(mine)
            return self._read(len(mine))
        theirs = self._read(len(mine))
        self._write(mine)
        return theirs

    def versions(self, version: str = VERSION) -> str:
        raw = self.xchg(encode_version(version))
        self.peer_version = version_number(raw)
        if self.peer_version < 5.70:  # check_version_compatibility: the peer would exit(1)
            raise EngineError(f"perftest peer version {raw.rstrip(bytes(1))!r}: "
                              "4.5-0.17's exchange needs 5.70 or later")
        return raw.split(b"\0", 1)[0].decode("ascii", "replace")

    def sys_data(self, cycle_buffer: int, cache_line: int) -> tuple[int, int]:
        """check_sys_data: both ends take the larger of each (two 4-byte network-order ints)."""
        (theirs_cycle,) = struct.unpack("!i", self.xchg(struct.pack("!i", cycle_buffer)))
        (theirs_line,) = struct.unpack("!i", self.xchg(struct.pack("!i", cache_line)))
        return max(cycle_buffer, theirs_cycle), max(cache_line, theirs_line)

    def mtu(self, mtu: int) -> int:
        theirs = decode_mtu(self.xchg(encode_mtu(mtu)))
        return min(mtu, theirs) if theirs else mtu

    def keys(self, mine: Dest) -> Dest:
        return Dest.decode(self.xchg(mine.encode()))

    def reports(self, mine: BwReport) -> BwReport:
        """xchg_bw_reports: size (8), iters (8: peer >= 5.33), peak, avg, rate (doubles),
        each its own exchange, big-endian as the C code's hton_* on little-endian hosts."""
        size = struct.unpack("!Q", self.xchg(struct.pack("!Q", mine.size)))[0]
        iters = struct.unpack("!Q", self.xchg(struct.pack("!Q", mine.iters)))[0]
        vals = [struct.unpack("!d", self.xchg(struct.pack("!d", v)))[0]
                for v in (mine.bw_peak, mine.bw_avg, mine.msg_rate)]
        return BwReport(size, iters, *vals)

    def close(self, mine: Dest) -> None:
        """ctx_close_connection: a sync, then both write "done" (nobody reads it)."""
        self.keys(mine)
        try:
            self._write(DONE)
        except OSError:  # the peer may already have closed: it never reads "done"
            pass

    def _write(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise EngineError(f"perftest peer: write failed ({e.strerror or e})") from None

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except TimeoutError:
                raise EngineError(f"perftest peer silent for {self.sock.gettimeout():g} s") from None
            except OSError as e:
                raise EngineError(f"perftest peer: read failed ({e.strerror or e})") from None
            if not chunk:
                raise EngineError(f"perftest peer closed the connection ({len(buf)} of {n} "
                                  "bytes of a message read)")
            buf += chunk
        return bytes(buf)
