"""perftest's output, as 4.5-0.17 prints it, and a parser for it (ours and real perftest's).

The format strings are perftest_parameters.h's: RESULT_LINE, RESULT_FMT,
REPORT_FMT (bandwidth, MB/sec = 2**20 bytes/s), RESULT_FMT_LAT,
REPORT_FMT_LAT, RESULT_FMT_LAT_DUR and REPORT_FMT_LAT_DUR (latency, usec),
each followed by RESULT_EXT / REPORT_EXT ("\\n").
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

from .exchange import Dest, Test

RESULT_LINE = "-" * 87 + "\n"
RESULT_FMT = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
REPORT_FMT = " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n"
RESULT_FMT_LAT = (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]"
                  "    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n")
REPORT_FMT_LAT = (" %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f"
                  "\t\t%-7.2f \t\t%-7.2f\n")
RESULT_FMT_LAT_DUR = " #bytes        #iterations       t_avg[usec]    tps average\n"
REPORT_FMT_LAT_DUR = " %-7d       %d            %-7.2f        %-7.2f\n"
MB = 0x100000  # report_fmt MBS
LAT_MEASURE_TAIL = 2  # print_report_lat drops the two largest samples
TITLES = {"write": "RDMA_Write", "read": "RDMA_Read", "send": "Send"}


@dataclass(frozen=True)
class BwRow:
    size: int
    iters: int
    bw_peak: float  # MB/sec (2**20 bytes)
    bw_avg: float
    msg_rate: float  # Mpps


@dataclass(frozen=True)
class LatRow:
    size: int
    iters: int
    t_min: float  # usec
    t_max: float
    t_typical: float
    t_avg: float
    t_stdev: float
    p99: float
    p999: float


@dataclass(frozen=True)
class LatDurRow:
    size: int
    iters: int
    t_avg: float
    tps: float


Row = BwRow | LatRow | LatDurRow


def bw_row(row: BwRow) -> str:
    return REPORT_FMT % (row.size, row.iters, row.bw_peak, row.bw_avg, row.msg_rate)


def lat_row(row: LatRow | LatDurRow) -> str:
    if isinstance(row, LatDurRow):
        return REPORT_FMT_LAT_DUR % (row.size, row.iters, row.t_avg, row.tps)
    return REPORT_FMT_LAT % (row.size, row.iters, row.t_min, row.t_max, row.t_typical, row.t_avg,
                             row.t_stdev, row.p99, row.p999)


def header(test: Test, duration: bool = False) -> str:
    if test.bw:
        return RESULT_LINE + RESULT_FMT
    return RESULT_LINE + (RESULT_FMT_LAT_DUR if duration else RESULT_FMT_LAT)


def banner(test: Test, *, qps: int, mtu: int, duplex: bool, tx_depth: int, out_reads: int,
           device: str = "rocelab-engine", tos: int = -1) -> str:
    """ctx_print_test_info's main lines (the ones that apply to an RC test over Ethernet)."""
    kind = ("Bidirectional " if duplex else "") + ("BW " if test.bw else "Latency ")
    lines = [RESULT_LINE.rstrip("\n"), f"                    {TITLES[test.verb]} {kind}Test",
             f" Dual-port       : OFF\t\tDevice         : {device}",
             f" Number of qps   : {qps}\t\tTransport type : IB",
             " Connection type : RC\t\tUsing SRQ      : OFF",
             f" TX depth        : {tx_depth}", f" Mtu             : {mtu}[B]",
             " Link type       : Ethernet", " GID index       : 1"]
    if test.verb == "read":
        lines.append(f" Outstand reads  : {out_reads}")
    lines.append(" Data ex. method : Ethernet" + (f" \tTOS    : {tos}" if tos >= 0 else ""))
    return "\n".join(lines) + "\n" + RESULT_LINE


def _alt_hex(value: int, width: int) -> str:
    """C's "%#0Nx": 0x and zero padding to N characters in all, plain zeros for 0."""
    return f"{value:#0{width}x}" if value else "0" * width


def addresses(test: Test, local: list[Dest], remote: list[Dest]) -> str:
    """ctx_print_pingpong_data for every QP, local then remote."""
    out = []
    for side, dests in (("local", local), ("remote", remote)):
        for d in dests:
            line = (f" {side} address: LID {_alt_hex(d.lid, 4)} QPN {_alt_hex(d.qpn, 6)}"
                    f" PSN {_alt_hex(d.psn, 6)}")
            if test.verb == "read":
                line += f" OUT {_alt_hex(d.out_reads, 4)}"
            if test.verb in ("read", "write"):
                line += f" RKey {_alt_hex(d.rkey, 8)} VAddr {_alt_hex(d.vaddr, 16)}"
            out.append(line)
            out.append(" GID: " + ":".join(f"{b:02d}" for b in d.gid))
    return "\n".join(out) + "\n"


# -- the figures, computed as perftest computes them -------------------------

def bw_figures(size: int, posted: list[float], completed: list[float], cq_mod: int = 100,
               peak: bool = True) -> BwRow:
    """print_report_bw: average over first post -> last completion; peak as the best
    (completion j - post i) / (j - i + 1) over signaled completions. Times in seconds;
    posted[i]/completed[i] per message (completed: at least every cq_mod-th filled)."""
    n = len(posted)
    if n == 0:
        return BwRow(size, 0, 0.0, 0.0, 0.0)
    total = max(completed[-1] - posted[0], 1e-9)
    avg = size * n / total / MB
    rate = n / total / 1e6
    best = total
    if peak:
        step = max(1, n // 2000)  # perftest is O(n^2 / cq_mod); sample long runs
        for i in range(0, n, step):
            j = -(-(i + 1) // cq_mod) * cq_mod - 1
            while j < n:
                best = min(best, (completed[j] - posted[i]) / (j - i + 1))
                j += cq_mod
            if n % cq_mod:
                best = min(best, (completed[n - 1] - posted[i]) / (n - i))
    bw_peak = size / max(best, 1e-12) / MB if peak else 0.0
    return BwRow(size, n, bw_peak, avg, rate)


def lat_figures(size: int, posted: list[float], rtt_factor: int) -> LatRow:
    """print_report_lat: deltas between consecutive posts (a full ping-pong, halved for
    WRITE/SEND), sorted, the two largest dropped; stdev with perftest's int truncation."""
    deltas = sorted((b - a) * 1e6 / rtt_factor for a, b in zip(posted, posted[1:]))
    n = len(deltas) - LAT_MEASURE_TAIL
    if n < 1:
        return LatRow(size, len(posted), *([0.0] * 7))
    median = (deltas[n // 2] + deltas[n // 2 - 1]) / 2 if (n - 1) % 2 else deltas[n // 2]
    avg = sum(deltas[:n]) / n
    stdev = math.sqrt(sum(int(avg - d) ** 2 for d in deltas[:n]) / n)
    p99 = deltas[min(math.ceil(n * 0.99), len(deltas) - 1)]
    p999 = deltas[min(math.ceil(n * 0.999), len(deltas) - 1)]
    return LatRow(size, len(posted), deltas[0], deltas[n], median, avg, stdev, p99, p999)


# -- parsing ----------------------------------------------------------------

_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_BW = re.compile(r"^\s*(\d+)\s+(\d+)\s+" + r"\s+".join([_NUM] * 3) + r"\s*$")
_LAT = re.compile(r"^\s*(\d+)\s+(\d+)\s+" + r"\s+".join([_NUM] * 7) + r"\s*$")
_LAT_DUR = re.compile(r"^\s*(\d+)\s+(\d+)\s+" + _NUM + r"\s+" + _NUM + r"\s*$")


def parse(text: str) -> list[Row]:
    """Every result row of perftest output (ours or the real binary's), in order."""
    rows: list[Row] = []
    kind = None
    for line in text.splitlines():
        if line.startswith(" #bytes"):
            kind = "lat_dur" if "tps average" in line else "lat" if "t_min" in line else "bw"
            continue
        if kind is None:
            continue
        if kind == "bw" and (m := _BW.match(line)):
            rows.append(BwRow(int(m[1]), int(m[2]), float(m[3]), float(m[4]), float(m[5])))
        elif kind == "lat" and (m := _LAT.match(line)):
            rows.append(LatRow(int(m[1]), int(m[2]), *(float(m[i]) for i in range(3, 10))))
        elif kind == "lat_dur" and (m := _LAT_DUR.match(line)):
            rows.append(LatDurRow(int(m[1]), int(m[2]), float(m[3]), float(m[4])))
    return rows


def to_json(row: Row) -> dict[str, Any]:
    d = asdict(row)
    if isinstance(row, BwRow):
        d["bw_avg_gbps"] = round(row.bw_avg * MB * 8 / 1e9, 6)
        d["bw_peak_gbps"] = round(row.bw_peak * MB * 8 / 1e9, 6)
    return d
