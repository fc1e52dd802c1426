"""Engine benchmark: RoCEv2 goodput of one QP on one veth, against iperf3 -u.

Two namespaces (bx-a, bx-b) joined by one veth whose MTU just fits the
payload plus headers. For each payload size the engine streams RDMA WRITEs
(then READs) over a 64 MiB region for a couple of seconds -- requester in
bx-a, responder in bx-b, each its own process on its own CPU, as two hosts'
engine daemons run -- and the region's hash proves every byte landed. The baseline, measured in
the same run on the same path: `iperf3 -u -b 0 -l <payload>`, the rate its
server received. The target is engine goodput >= 0.9 of that. CPU per packet
is reported per side, for the engine (user and kernel time apart: the user
part is the engine's own work, on the compiled data path or in Python, see
`data_path`) and for iperf3 (from its --json), with the engine's cost as a
multiple of iperf3's.

Each payload size gets `repeats` rounds of (iperf3, engine WRITE, engine
READ), interleaved so that all three see the same machine, and the medians
are compared (the best run of each is reported too: on a shared two-core
machine a concurrent job halves any of them; `load_average_1m` records how
busy the machine was). The engine's datagrams carry 16-32 bytes more
headers than iperf3's (BTH, RETH on first packets, AETH, ICRC): the same
payload, a few percent more wire.

Run it with `python -m emulator.bench --only engine` (root); the whole
section takes about a minute and cleans up after itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .. import netns
from ..errors import EngineError
from ..waiting import wait_until
from .iperf import IPERF_S, iperf3_figures, per_packet, run_iperf3

__all__ = ["iperf3_figures", "run"]  # iperf3_figures: the baseline's reader, tested with this

NS_A, NS_B = "bx-a", "bx-b"  # requester / iperf3 client, responder / iperf3 server
IP_A, IP_B = "10.251.0.1", "10.251.0.0"
IFNAME = "bx0"
QPN_A, QPN_B = 0x21, 0x4321
PSN_A, PSN_B = 0xFFF000, 0x000100  # A's PSNs wrap during the run, as on a long-lived QP
PAYLOADS = (1024, 4096)
HEADERS = 60  # IPv4 20 + UDP 8 + BTH 12 + RETH 16 + ICRC 4
MIB = 1 << 20
REGION = 64 * MIB  # what is hashed at the end
CHUNK = 4 * MIB  # one work request
DEPTH = 4  # work requests kept in flight
STREAM_S = 2.0  # each engine measurement streams this long (at least one full pass)
TARGET_RATIO = 0.9
BUDGET_S = 80.0  # further repeats are skipped past this (the section must stay < 90 s)
CHILD_TIMEOUT_S = 30.0
# One core per side when there are two (engine processes and iperf3 alike).
WINDOW = 512  # request packets in flight: the engine default for unshaped labs
CPUS: dict[str, int | None] = ({NS_A: 0, NS_B: 1} if (os.cpu_count() or 1) >= 2
                               else {NS_A: None, NS_B: None})


@dataclass(frozen=True)
class Case:
    op: str  # "write" or "read"
    payload: int
    duration: float = STREAM_S


# -- the lab: two namespaces, one veth ----------------------------------------

@contextlib.contextmanager
def veth_pair() -> Iterator[None]:
    """bx-a and bx-b joined by one veth; both removed on the way out, always."""
    from pyroute2 import IPRoute

    with contextlib.ExitStack() as undo:
        for ns in (NS_A, NS_B):
            netns.remove(ns)  # a leftover of a killed run (ours: the bx- prefix)
            netns.create(ns)
            undo.callback(netns.remove, ns)
        with netns.entered(NS_A), IPRoute() as ipr:
            ipr.link("add", ifname=IFNAME, kind="veth", peer={"ifname": IFNAME, "net_ns_fd": NS_B})
        for ns, ip in ((NS_A, IP_A), (NS_B, IP_B)):
            with netns.entered(ns), IPRoute() as ipr:
                idx = ipr.link_lookup(ifname=IFNAME)[0]
                ipr.addr("add", index=idx, address=ip, prefixlen=31)
                ipr.link("set", index=idx, state="up")
                ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
        yield


def set_mtu(mtu: int) -> None:
    from pyroute2 import IPRoute

    for ns in (NS_A, NS_B):
        with netns.entered(ns), IPRoute() as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname=IFNAME)[0], mtu=mtu)


def _enter(ns: str) -> None:
    """Move this (single-threaded, forked) process into namespace `ns`, and
    onto its own CPU: two hosts do not share a core, and left alone the
    scheduler tends to pull a sender and its receiver onto one (affine wakeups)."""
    fd = netns.open_fd(ns)
    try:
        netns.setns(fd)
    finally:
        os.close(fd)
    cpu = CPUS[ns]
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


# -- the engine: each side a forked process inside its namespace -------------

def _side(me: str, peer: str, case: Case, qpn: int, rqpn: int, sp: int, rp: int):
    from ..roce.endpoint import Endpoint
    from ..roce.memory import MemoryTable
    from ..roce.rc import QueuePair
    from ..roce.transport import Transport
    from ..roce.verbs import QpConfig

    cfg = QpConfig(qpn=qpn, remote_qpn=rqpn, send_psn=sp, recv_psn=rp, mtu=case.payload,
                   window=WINDOW)
    memory = MemoryTable(key_seed=qpn & 0xFF)
    ep = Endpoint(Transport(me))
    qp = QueuePair(cfg, memory)
    ep.add(qp, peer)
    return ep, qp, memory


def responder_main(case: Case, data: bytes, conn) -> None:
    from ..roce.memory import Access

    _enter(NS_B)
    ep, qp, memory = _side(IP_B, IP_A, case, QPN_B, QPN_A, PSN_B, PSN_A)
    sink = bytearray(len(data))
    mr_w = memory.register(sink, Access.REMOTE_WRITE)
    mr_r = memory.register(data, Access.REMOTE_READ)
    conn.send({"write": (mr_w.va, mr_w.rkey), "read": (mr_r.va, mr_r.rkey)})
    cpu0, got = os.times(), []

    def finished() -> bool:
        got.extend(qp.completions())
        return any(c.data == b"bye" for c in got) and qp.idle

    ep.run_until(finished, timeout=CHILD_TIMEOUT_S, what="benchmark responder")
    conn.send({"sha": hashlib.sha256(sink).hexdigest() if case.op == "write" else None,
               **_cpu_since(cpu0), "waits": ep.waits, "qp": qp.counters.as_dict(),
               "transport": ep.transport.counters.as_dict()})


def requester_main(case: Case, keys: dict, conn) -> None:
    _enter(NS_A)
    ep, qp, _ = _side(IP_A, IP_B, case, QPN_A, QPN_B, PSN_A, PSN_B)
    va, rkey = keys[case.op]
    dest = bytearray(REGION if case.op == "read" else 0)
    src, dst = memoryview(keys["data"]), memoryview(dest)

    def post(wr_id: int, offset: int) -> None:
        if case.op == "write":
            qp.post_write(wr_id, src[offset:offset + CHUNK], va + offset, rkey)
        else:
            qp.post_read(wr_id, dst[offset:offset + CHUNK], va + offset, rkey)

    cpu0, t0 = os.times(), time.perf_counter()
    moved = stream(ep, qp, post, case.duration)
    elapsed, cpu = time.perf_counter() - t0, _cpu_since(cpu0)
    qp.post_send(0, b"bye")
    ep.run_until(lambda: qp.requester.idle, timeout=CHILD_TIMEOUT_S, what="bye")
    conn.send({"bytes": moved, "seconds": elapsed, **cpu, "waits": ep.waits,
               "sha": hashlib.sha256(dest).hexdigest() if case.op == "read" else None,
               "qp": qp.counters.as_dict(), "transport": ep.transport.counters.as_dict()})


def stream(ep, qp, post: Callable[[int, int], None], duration: float) -> int:
    """Keep DEPTH chunk-sized work requests in flight, cycling over the
    region, for `duration` seconds and at least one full pass; return the
    bytes moved. Each pass writes (or reads) the same bytes to the same
    place, so the final hash checks them all."""
    from ..roce.verbs import WcStatus

    chunks, posted, done, moved = REGION // CHUNK, 0, 0, 0
    stop = time.monotonic() + duration
    limit = stop + CHILD_TIMEOUT_S
    while True:
        now = time.monotonic()
        while posted - done < DEPTH and (posted < chunks or now < stop):
            post(posted, posted % chunks * CHUNK)
            posted += 1
        if posted == done:
            return moved
        if now > limit:
            raise EngineError(f"benchmark stream stuck: {done}/{posted} work requests done")
        ep.step(max_wait=0.01)
        for c in qp.completions():
            if c.status is not WcStatus.SUCCESS:
                raise EngineError(f"work request {c.wr_id}: {c.status.value}")
            done += 1
            moved += c.byte_len


def run_engine(case: Case, data: bytes) -> dict[str, Any]:
    """One measurement: responder and requester processes; their merged report."""
    ctx = multiprocessing.get_context("fork")
    (rb, rb_child), (ra, ra_child) = ctx.Pipe(), ctx.Pipe()
    procs = [ctx.Process(target=responder_main, args=(case, data, rb_child), daemon=True,
                         name="responder")]
    try:
        procs[0].start()
        keys = _recv(rb, procs[0], 10) | {"data": data}
        procs.append(ctx.Process(target=requester_main, args=(case, keys, ra_child),
                                 daemon=True, name="requester"))
        procs[1].start()
        a = _recv(ra, procs[1], CHILD_TIMEOUT_S * 2 + case.duration)
        b = _recv(rb, procs[0], CHILD_TIMEOUT_S)
    finally:
        for p in procs:
            p.join(2)
            if p.is_alive():
                p.kill()  # by its PID
                p.join()
    want = hashlib.sha256(data).hexdigest()
    got = b["sha"] if case.op == "write" else a["sha"]
    sender, receiver = (a, b) if case.op == "write" else (b, a)
    packets = receiver["qp"]["rx_packets"]
    return {
        "goodput_gbit_s": round(a["bytes"] * 8 / a["seconds"] / 1e9, 3),
        "bytes": a["bytes"], "seconds": round(a["seconds"], 3), "integrity_ok": got == want,
        "data_packets": packets,
        "retransmitted_packets": a["qp"]["retransmitted_packets"],
        "timeouts": a["qp"]["timeouts"], "naks": a["qp"]["naks_rx"] + a["qp"]["implied_naks"],
        "tx_errors": a["transport"]["tx_errors"] + b["transport"]["tx_errors"],
        "data_path": a["data_path"],
        # blocking waits per 1,000 data packets: each one a wakeup the other side pays for
        "waits_per_1000_packets": {side: round(r["waits"] * 1000 / packets, 1) if packets else None
                                   for side, r in (("sender", sender), ("receiver", receiver))},
        "cpu_us_per_packet": {"sender": per_packet(sender["cpu_s"], packets),
                              "receiver": per_packet(receiver["cpu_s"], packets)},
        # user: the engine's own work (Python, or the compiled data path); system: the
        # kernel's, syscalls and the veth's softirq (charged to the sending side)
        "cpu_split_us_per_packet": {
            side: {"user": per_packet(r["user_s"], packets),
                   "system": per_packet(r["system_s"], packets)}
            for side, r in (("sender", sender), ("receiver", receiver))},
    }


def _cpu_since(t0: os.times_result) -> dict[str, Any]:
    """CPU seconds this process used since `t0`: in all, in user space, in the kernel."""
    t = os.times()
    user, system = t.user - t0.user, t.system - t0.system
    from ..roce import wire

    return {"cpu_s": user + system, "user_s": user, "system_s": system,
            "data_path": wire.name()}




def _recv(conn, proc, timeout: float):
    """The child's report; fail at once if it died without one, or after `timeout`."""
    def reported() -> bool:
        if conn.poll(0.05):
            return True
        if not proc.is_alive() and not conn.poll():
            raise EngineError(f"benchmark process {proc.name} exited ({proc.exitcode}) "
                              "without a report; its traceback is above")
        return False

    wait_until(reported, timeout, 0, what=f"no report from benchmark process {proc.name}",
               error=EngineError)
    return conn.recv()


# -- the section ----------------------------------------------------------------

def run(repeats: int = 3, log=lambda m: print(m, file=sys.stderr)) -> dict[str, Any]:
    """The section: per payload, `repeats` rounds of iperf3, engine WRITE and
    engine READ, interleaved so that all three see the same machine; medians."""
    if os.geteuid() != 0:
        raise EngineError("the engine benchmark needs root (network namespaces)")
    started = time.monotonic()
    out: dict[str, Any] = {"load_average_1m": os.getloadavg()[0], "stream_s": STREAM_S,
                           "region_bytes": REGION, "target_ratio": TARGET_RATIO,
                           "cpus": {"requester_and_iperf3_client": CPUS[NS_A],
                                    "responder_and_iperf3_server": CPUS[NS_B]}}
    with veth_pair():
        for payload in PAYLOADS:
            out[f"payload_{payload}"] = _payload_rounds(payload, repeats, log)
    out["meets_target"] = all(out[f"payload_{p}"][op]["meets_target"]
                              for p in PAYLOADS for op in ("write", "read"))
    out["section_s"] = round(time.monotonic() - started, 1)
    return out


def _payload_rounds(payload: int, repeats: int, log) -> dict[str, Any]:
    budget_end = time.monotonic() + BUDGET_S / len(PAYLOADS)
    set_mtu(payload + HEADERS)
    data = os.urandom(REGION)
    runs: dict[str, list[dict[str, Any]]] = {"iperf3": [], "write": [], "read": []}
    for i in range(max(1, repeats)):
        if i and time.monotonic() + IPERF_S + 3 * STREAM_S > budget_end:
            log(f"engine {payload} B: stopping after {i} rounds (time budget)")
            break
        runs["iperf3"].append(run_iperf3(payload, NS_A, NS_B, IP_B, CPUS))
        for op in ("write", "read"):
            runs[op].append(run_engine(Case(op, payload), data))
        log(f"engine {payload} B round {i + 1}: iperf3 -u received "
            f"{runs['iperf3'][-1]['received_gbit_s']} Gbit/s "
            f"({runs['iperf3'][-1]['lost_percent']}% lost); engine WRITE "
            f"{runs['write'][-1]['goodput_gbit_s']}, READ {runs['read'][-1]['goodput_gbit_s']}")
    iperf = statistics.median(r["received_gbit_s"] for r in runs["iperf3"])
    iperf_cpu = _median_cpu(runs["iperf3"])
    res: dict[str, Any] = {"mtu": payload + HEADERS, "iperf3_udp": {
        "received_gbit_s": iperf, "best_gbit_s": max(r["received_gbit_s"] for r in runs["iperf3"]),
        "cpu_us_per_packet": iperf_cpu, "runs": runs["iperf3"]}}
    for op in ("write", "read"):
        res[op] = _summary(runs[op], iperf, iperf_cpu)
        log(f"engine {payload} B {op.upper()}: {res[op]['goodput_gbit_s']} Gbit/s = "
            f"{res[op]['ratio_to_iperf3']} x iperf3 -u {iperf} Gbit/s; target >= {TARGET_RATIO}: "
            f"{'met' if res[op]['meets_target'] else 'NOT met'}")
    return res


def _summary(runs: list[dict[str, Any]], iperf_gbit_s: float,
             iperf_cpu: dict[str, float | None] | None = None) -> dict[str, Any]:
    median = statistics.median(r["goodput_gbit_s"] for r in runs)
    ratio = round(median / iperf_gbit_s, 3) if iperf_gbit_s else None
    ok = all(r["integrity_ok"] for r in runs)
    cpu = _median_cpu(runs)
    assert cpu is not None
    return {"goodput_gbit_s": median, "best_gbit_s": max(r["goodput_gbit_s"] for r in runs),
            "ratio_to_iperf3": ratio, "integrity_ok": ok,
            "meets_target": ok and ratio is not None and ratio >= TARGET_RATIO,
            "data_path": runs[0].get("data_path"),
            "cpu_us_per_packet": cpu,
            # the engine's CPU per packet as a multiple of iperf3's, side by side
            "cpu_vs_iperf3": {side: round(cpu[side] / iperf_cpu[side], 2)
                              for side in cpu
                              if iperf_cpu and cpu[side] and iperf_cpu.get(side)},
            "retransmitted_packets": sum(r["retransmitted_packets"] for r in runs),
            "runs": runs}


def _median_cpu(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Per side, the median CPU microseconds per packet of runs that report it."""
    if not any("cpu_us_per_packet" in r for r in runs):
        return None
    return {side: statistics.median(v for r in runs
                                    if (v := r.get("cpu_us_per_packet", {}).get(side)) is not None)
            for side in ("sender", "receiver")}
