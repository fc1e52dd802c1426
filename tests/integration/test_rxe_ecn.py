"""ECN reaches an rxe receiver: clos-2x4-cc-rxe (the congestion plane on, prefill1 and
decode1 as Soft-RoCE guests), a real `ib_write_bw --tclass=106` (DSCP 26, the RoCE
class; ECN ECT(0)) from prefill1 to decode1. rxe's window (128 unacked PSNs of up
to 4 KiB) is far above Kmin and the ports are shaped to 100 Mbit/s, so the queue
at the sender's shaped egress marks CE. A capture on decode1's wire to its guest
(the tap, after the leaf) counts CE frames delivered to the guest, and rxe answers
none of them with a CNP (BTH opcode 0x81): rxe has no DCQCN."""

from __future__ import annotations

import struct
import subprocess
import time
from pathlib import Path

import pytest

from emulator.metrics.scrape import Scraper
from emulator.rxe.hosts import vm_for
from emulator.rxe.vm import TAP

from .conftest import PREFIX, ROCELAB, cli, make_rxe_lab, poll

NAME = f"{PREFIX}rxecn"
ROCE_PORT = 4791
CNP = 0x81
N = 50
CLIENT_S = 12  # ~3 s at the shaped 100 Mbit/s: bounded all the same
ACK_TIMEOUT = 20  # perftest -u: 4.096 us x 2^20 = 4.3 s, longer than any pause here


@pytest.fixture(scope="module")
def lab():
    yield from make_rxe_lab("topologies/clos-2x4-cc-rxe.yaml", NAME)


def roce_frames(pcap: Path) -> list[tuple[str, str, int, int, int]]:
    """(src, dst, dscp, ecn, BTH opcode) of every IPv4/UDP 4791 frame of a pcap."""
    data = pcap.read_bytes()
    out, off = [], 24
    while off + 16 <= len(data):
        caplen = struct.unpack_from("<I", data, off + 8)[0]
        frame = data[off + 16: off + 16 + caplen]
        off += 16 + caplen
        if len(frame) < 14 + 20 + 8 + 1 or frame[12:14] != b"\x08\x00":
            continue
        ip = frame[14:]
        ihl = (ip[0] & 0x0F) * 4
        if ip[9] != 17 or struct.unpack_from("!H", ip, ihl + 2)[0] != ROCE_PORT:
            continue
        src, dst = ".".join(map(str, ip[12:16])), ".".join(map(str, ip[16:20]))
        out.append((src, dst, ip[1] >> 2, ip[1] & 3, ip[ihl + 8]))
    return out


def marks(scraper: Scraper) -> dict[tuple[str, str], float]:
    for fam in scraper.scrape().families:
        if fam.name == "rocelab_dataplane_ce_marked_packets_total":
            return {(lb["node"], lb["port"]): v for lb, v in fam.samples if lb.get("tc") == "3"}
    return {}


def listening(vm, port=18515) -> bool:
    rc, out, _ = vm.exec(["ss", "-Hltn"], timeout=10)
    return rc == 0 and f":{port} " in out


def two_flows_into(server, dst_ip: str) -> None:
    """ib_write_bw from prefill1's guest and the engine's write_bw from prefill2, both into
    decode1's guest, until both ended."""
    # two flows into decode1, so leaf3 -> decode1 queues and marks: rxe prefill1 ->
    # rxe decode1 on port 18516, and the engine on prefill2 -> a second real server
    # with the ACK timeout docs/rxe.md gives verbs programs on a dilated lab (-u 20, 4.3 s):
    # perftest's default (14, 67 ms) is shorter than the pauses two flows into one shaped
    # port cause, so rxe resent into the paused queue (completer_retry_err 5, 2 of 2 runs)
    argv = ["ib_write_bw", "-d", "rxe0", "-x", "1", "-F", "--tclass=106", "-u", str(ACK_TIMEOUT),
            "-s", "65536", "-n", str(N), "-p", "18516"]
    job = server.spawn(argv)
    rival = server.spawn(["ib_write_bw", "-d", "rxe0", "-x", "1", "-F", "-s", "65536",
                          "-D", "8"])
    engine = None
    try:
        poll(lambda: listening(server) and listening(server, 18516), timeout=30,
             what="both ib_write_bw servers listening")
        engine = subprocess.Popen([ROCELAB, "perftest", NAME, "write_bw", "--src", "prefill2",
                                   "--dst", "decode1", "-s", "65536", "-D", "8"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(2.0)  # the engine's flow is running
        # the guest ignores pause frames, but a pause holds its frames in its host
        # port's lossless class (the congestion plane's TBF), so the fabric loses nothing:
        # on an idle machine the run completes with no retry (it stalled while the wire's filter hid arriving
        # frames from the plane's ingress program: docs/rxe.md, "ECN and rxe")
        cli("exec", NAME, "prefill1", "--", "timeout", str(CLIENT_S), *argv,
            dst_ip, timeout=CLIENT_S + 20)
        assert server.wait(job, timeout=20) == 0
        assert engine.wait(timeout=60) == 0, engine.stderr.read() if engine.stderr else ""
    finally:
        server.kill(job)
        server.kill(rival)
        if engine is not None and engine.poll() is None:
            engine.kill()  # by PID: the client this test started


def test_ce_reaches_the_rxe_receiver_and_rxe_sends_no_cnp(lab, tmp_path):
    plan = lab.plan
    dst, src = plan.node("decode1"), plan.node("prefill1")
    server = vm_for(plan, dst)
    pcap = tmp_path / "decode1.pcap"
    # decode1's wire: frames the leaf delivered, on their way to the guest, and its replies
    dump = subprocess.Popen(["ip", "netns", "exec", dst.netns, "tcpdump", "-i", TAP, "-s", "96",
                             "-U", "-w", str(pcap), f"udp port {ROCE_PORT}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    scraper = Scraper(plan)
    try:
        poll(lambda: pcap.exists() and pcap.stat().st_size >= 24, timeout=10, what="tcpdump started")
        before = marks(scraper)
        two_flows_into(server, dst.address.split("/")[0])
        sender = vm_for(plan, src).counters()
        # the run completed (both ib_write_bw exited 0) and sent all N x 16 MTUs; a
        # resend is allowed: a guest starved of CPU on a busy machine loses a few frames
        # of its own (completer_retry_err 2 on one clean-clone CI run, 0 on an idle one)
        assert sender["sent_pkts"] >= N * 16, sender
        print(f"\nprefill1's rxe: sent_pkts {sender['sent_pkts']}, "
              f"completer_retry_err {sender['completer_retry_err']}")
        time.sleep(0.5)
        after = marks(scraper)
        rxe_counters = server.counters()
    finally:
        scraper.close()
        dump.terminate()  # by PID: the capture this test started
        dump.wait(10)
    marked = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    check_capture(roce_frames(pcap), src.address, dst.address,
                  {k: v for k, v in marked.items() if v}, rxe_counters)


def check_capture(frames: list[tuple[str, str, int, int, int]], src: str, dst: str,
                  marked: dict[tuple[str, str], float], rxe_counters: dict[str, int]) -> None:
    """What decode1's wire carried: CE-marked RoCE class frames to the guest, no CNP back."""
    to_guest = [f for f in frames if f[0] == src and f[1] == dst]
    from_guest = [f for f in frames if f[0] == dst and f[1] == src]
    assert len(to_guest) >= 100, len(to_guest)
    assert {f[2] for f in to_guest} == {26}  # the RoCE class, as the congestion plane classifies it
    ce = sum(1 for f in to_guest if f[3] == 3)
    ect = sum(1 for f in to_guest if f[3] == 2)
    print(f"\nframes to decode1's guest: {len(to_guest)} (ECT(0) {ect}, CE {ce}); "
          f"CE marked by port: {marked}; from the guest: {len(from_guest)}, CNPs: "
          f"{sum(1 for f in from_guest if f[4] == CNP)}; rxe rcvd_pkts {rxe_counters.get('rcvd_pkts')}")
    assert ce > 0, f"no CE reached decode1 (marks by port: {marked})"
    assert ce + ect == len(to_guest)  # every data frame ECN-capable
    assert sum(marked.values()) > 0  # where the two flows meet (ECMP decides which hop)
    assert from_guest and all(f[4] != CNP for f in from_guest)  # ACKs, never a CNP
    assert all(f[2] == 26 for f in from_guest)  # ACKs go back in the same class (the QP's tclass)
