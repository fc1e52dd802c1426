"""perftest's exchange against a fake peer that replays, call by call, what the C mains
of perftest 4.5-0.17 read and write (write_bw.c, read_bw.c, send_bw.c, write_lat.c,
read_lat.c, send_lat.c), for both roles, -a, -b and -q."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from emulator.errors import EngineError
from emulator.perftest.exchange import (
    DONE,
    KEY_MSG_SIZE_GID,
    BwReport,
    Dest,
    Exchange,
    Step,
    decode_mtu,
    encode_mtu,
    encode_version,
    sizes,
    steps,
    version_number,
)
from emulator.perftest.exchange import (
    Test as PerfTest,
)


class FakeC:
    """One perftest process's side of the socket: its ctx_xchg_data calls, in order."""

    def __init__(self, sock: socket.socket, servername: bool, version: bytes = b"6.06"):
        self.sock, self.client = sock, servername
        self.version = version
        self.log: list[str] = []
        self.peer_keys: list[bytes] = []

    def _read(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, f"peer closed during a {n}-byte read after {self.log}"
            buf += chunk
        return buf

    def xchg(self, what: str, mine: bytes) -> bytes:
        self.log.append(what)
        if self.client:
            self.sock.sendall(mine)
            return self._read(len(mine))
        theirs = self._read(len(mine))
        self.sock.sendall(mine)
        return theirs

    # perftest_communication.c
    def exchange_versions(self) -> None:
        rem = self.xchg("versions", self.version.ljust(16, b"\0"))
        assert version_number(rem) >= 5.70  # check_version_compatibility

    def check_sys_data(self) -> None:
        self.xchg("sys", struct.pack("!i", 4096))
        self.xchg("sys", struct.pack("!i", 64))

    def check_mtu(self) -> None:
        rem = self.xchg("mtu", b"3\0")  # IBV_MTU_1024, as rxe on a 1500-byte port
        assert decode_mtu(rem) is not None

    def hand_shake(self, qp: int = 0) -> None:
        msg = Dest.for_ipv4("10.9.0.1", qpn=0x11 + qp, psn=0x1234, rkey=0x99, vaddr=0x1000).encode()
        self.peer_keys.append(self.xchg("keys", msg))
        assert len(self.peer_keys[-1]) == KEY_MSG_SIZE_GID

    def xchg_bw_reports(self) -> None:
        for fmt in ("!Q", "!Q", "!d", "!d", "!d"):
            self.xchg("reports", struct.pack(fmt, 0))

    def close_connection(self) -> None:
        self.hand_shake()
        self.log.append("done")
        self.sock.sendall(b"done\0")

    def run(self, size: int) -> None:
        self.log.append(f"run {size}")

    # the mains, RC over Ethernet
    def write_bw(self, qps: int, run_all: bool, duplex: bool) -> None:  # read_bw is the same
        self.exchange_versions(), self.check_sys_data(), self.check_mtu()
        for i in range(qps):
            self.hand_shake(i)
        for i in range(qps):
            self.hand_shake(i)
        self.hand_shake()
        if not self.client and not duplex:
            self.hand_shake()
            self.xchg_bw_reports()
            self.close_connection()
            return
        for size in sizes(65536, run_all):
            if duplex:
                self.hand_shake()
            self.run(size)
            if duplex and run_all:
                self.hand_shake()
            if duplex:
                self.xchg_bw_reports()
        if self.client and not duplex:
            self.hand_shake()
            self.xchg_bw_reports()
        self.close_connection()

    def send_bw(self, qps: int, run_all: bool, duplex: bool) -> None:
        self.exchange_versions(), self.check_sys_data(), self.check_mtu()
        for i in range(qps):
            self.hand_shake(i)
        self.hand_shake()
        for i in range(qps):
            self.hand_shake(i)
        for size in sizes(65536, run_all):
            self.hand_shake()
            self.run(size)
            if duplex:
                self.xchg_bw_reports()
            if run_all:
                self.hand_shake()
        self.close_connection()

    def write_lat(self, qps: int, run_all: bool, duplex: bool) -> None:
        self.exchange_versions(), self.check_sys_data(), self.check_mtu()
        self.hand_shake()
        for i in range(qps):
            self.hand_shake(i)
        for i in range(qps):
            self.hand_shake(i)
        self.hand_shake()
        for size in sizes(2, run_all):
            self.run(size)
        self.log.append("exit")

    def read_lat(self, qps: int, run_all: bool, duplex: bool) -> None:
        self.exchange_versions(), self.check_sys_data(), self.check_mtu()
        self.hand_shake()
        for i in range(qps):
            self.hand_shake(i)
        for i in range(qps):
            self.hand_shake(i)
        self.hand_shake()
        if not self.client:
            self.close_connection()
            return
        for size in sizes(2, run_all):
            self.run(size)
        self.close_connection()

    def send_lat(self, qps: int, run_all: bool, duplex: bool) -> None:
        self.exchange_versions(), self.check_sys_data(), self.check_mtu()
        for i in range(qps):
            self.hand_shake(i)
        self.hand_shake()
        for i in range(qps):
            self.hand_shake(i)
        for size in sizes(2, run_all):
            self.hand_shake()
            self.run(size)
        self.close_connection()


MAINS = {PerfTest.WRITE_BW: FakeC.write_bw, PerfTest.READ_BW: FakeC.write_bw, PerfTest.SEND_BW: FakeC.send_bw,
         PerfTest.WRITE_LAT: FakeC.write_lat, PerfTest.READ_LAT: FakeC.read_lat,
         PerfTest.SEND_LAT: FakeC.send_lat}


def ours(ex: Exchange, test: PerfTest, qps: int, run_all: bool, duplex: bool) -> list[str]:
    """Walk exchange.steps as the engine's session does, without traffic; log like FakeC."""
    log: list[str] = []
    local = [Dest.for_ipv4("10.2.0.1", qpn=0x200 + i, psn=7, rkey=5, vaddr=0x2000) for i in range(qps)]
    sz = sizes(65536 if test.bw else 2, run_all)
    for step, i in steps(test, ex.client, run_all, duplex):
        if step is Step.RUN:
            log.append(f"run {sz[i]}")
        elif step is Step.END:
            log += ["exit"] if test is PerfTest.WRITE_LAT else []
        else:
            log += wire_step(ex, step, local)
    return log


def wire_step(ex: Exchange, step: Step, local: list[Dest]) -> list[str]:
    """Do `step`'s part of the exchange (none for the local SETUP and CONNECT), checking
    what the peer sent; FakeC's log lines for it."""
    if step is Step.VERSIONS:
        ex.versions()
        return ["versions"]
    if step is Step.SYS:
        assert ex.sys_data(4096, 64) == (4096, 64)
        return ["sys", "sys"]
    if step is Step.MTU:
        assert ex.mtu(4096) == 1024
        return ["mtu"]
    if step is Step.KEYS:
        for d in local:
            assert ex.keys(d).ipv4 == "10.9.0.1"
        return ["keys"] * len(local)
    if step is Step.SYNC:
        ex.keys(local[0])
        return ["keys"]
    if step is Step.REPORTS:
        ex.reports(BwReport(65536, 10, 1.0, 1.0, 0.1))
        return ["reports"] * 5
    if step is Step.CLOSE:
        ex.close(local[0])
        return ["keys", "done"]
    return []


CASES = [(t, client, qps, run_all, duplex) for t in PerfTest for client in (True, False)
         for qps, run_all, duplex in ((1, False, False), (2, False, False), (1, True, False),
                                      (1, False, True), (2, True, True)) if t.bw or not duplex]


@pytest.mark.parametrize("test,client,qps,run_all,duplex", CASES,
                         ids=[f"{c[0].value}-{'client' if c[1] else 'server'}-q{c[2]}"
                              f"{'-a' if c[3] else ''}{'-b' if c[4] else ''}" for c in CASES])
def test_sequence_matches_the_c_main(test, client, qps, run_all, duplex):
    a, b = socket.socketpair()
    fake = FakeC(b, servername=not client)
    box: dict = {}

    def peer() -> None:
        try:
            MAINS[test](fake, qps, run_all, duplex)
        except BaseException as e:  # noqa: BLE001 -- reported by the test thread
            box["error"] = e
        finally:
            b.shutdown(socket.SHUT_WR)

    t = threading.Thread(target=peer)
    t.start()
    ex = Exchange(a, client=client, timeout_s=5)
    log = ours(ex, test, qps, run_all, duplex)
    t.join(5)
    assert "error" not in box, box.get("error")
    # the peer writes "done" last; nothing may be left unread on our side but that
    rest = a.recv(64)
    assert rest in (b"", DONE), rest
    # what crossed the socket, in order (a run is local to each side)
    wire = [m for m in log if not m.startswith("run")]
    assert wire == [m for m in fake.log if not m.startswith("run")], f"ours {log}\nC {fake.log}"
    if duplex or test in (PerfTest.WRITE_LAT, PerfTest.SEND_LAT, PerfTest.SEND_BW):
        assert log == fake.log  # both sides run: the runs sit between the same syncs
    a.close(), b.close()


def test_key_message_is_perftests_format():
    d = Dest.for_ipv4("10.2.0.1", qpn=0x11, psn=0x123456, rkey=0x1234, vaddr=0x7F0000001000,
                      out_reads=128)
    raw = d.encode()
    assert len(raw) == KEY_MSG_SIZE_GID and raw.endswith(b":\0")
    assert raw[:-1].decode() == ("0000:0080:000011:123456:00001234:00007f0000001000:"
                                 "00:00:00:00:00:00:00:00:00:00:ff:ff:0a:02:00:01:00000000:")
    assert Dest.decode(raw) == d and Dest.decode(raw).ipv4 == "10.2.0.1"


def test_non_ipv4_gid_is_refused():
    d = Dest(qpn=1, psn=1, rkey=1, vaddr=1, gid=bytes.fromhex("fe80" + "00" * 14))
    with pytest.raises(EngineError, match="IPv4"):
        _ = Dest.decode(d.encode()).ipv4


def test_version_and_mtu_fields():
    assert encode_version() == b"6.06" + bytes(12)
    assert version_number(b"5.70\0junk") == 5.70 and version_number(b"\0" * 16) == 0.0
    assert encode_mtu(1024) == b"3\0" and encode_mtu(4096) == b"5\0"
    assert decode_mtu(b"3\0") == 1024 and decode_mtu(b"9\0") is None


def test_old_peer_version_is_refused():
    a, b = socket.socketpair()
    b.sendall(b"5.60".ljust(16, b"\0"))
    with pytest.raises(EngineError, match="5.70"):
        Exchange(a, client=False, timeout_s=2).versions()
    a.close(), b.close()


def test_peer_that_closes_mid_message_is_named():
    a, b = socket.socketpair()
    b.sendall(b"0000:0001")
    b.close()
    with pytest.raises(EngineError, match="closed the connection"):
        Exchange(a, client=False, timeout_s=2).keys(Dest(qpn=1, psn=1, rkey=1, vaddr=1))
    a.close()
