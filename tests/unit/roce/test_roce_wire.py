"""The compiled data path (`_wire`) against the pure-Python reference, byte for byte.

- `Sender.add` builds exactly what `FrameBuilder.build` builds, for every
  opcode (CNP included), any TOS, IP ident, BECN, payload length and pad;
- `Sender.send` delivers each datagram once, in order, and keeps what the
  kernel refuses; it raises other errors and empties;
- `Receiver.recv` parses exactly what `parse` parses and checks the ICRC as
  `check_in_place` does (rxe's captures included), counts malformed and
  truncated datagrams, and gives each datagram of a burst its own payload;
- `wire.compiled()` honours ROCELAB_ENGINE_PURE.

Every datagram crosses a loopback UDP socket (no root needed). Skipped where
the extension is not built: `make venv` builds it, so CI runs these.
"""

from __future__ import annotations

import errno
import socket
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulator.roce import wire
from emulator.roce.fastpath import FrameBuilder, Run, Segment, parse
from emulator.roce.headers import Opcode
from emulator.roce.icrc import check_icrc, check_in_place

_wire = wire.compiled()
pytestmark = pytest.mark.skipif(_wire is None, reason="emulator.roce._wire is not built")
FAST = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
u24 = st.integers(0, (1 << 24) - 1)
segments = st.builds(
    Segment,
    opcode=st.sampled_from(list(Opcode)), dest_qp=u24, psn=u24,
    ackreq=st.booleans(), va=st.integers(0, (1 << 64) - 1), rkey=st.integers(0, (1 << 32) - 1),
    dma_length=st.integers(0, (1 << 32) - 1), syndrome=st.integers(0, 255), msn=u24,
    payload=st.binary(max_size=1100), becn=st.booleans(),
)
A, B = "192.0.2.1", "192.0.2.2"
LO = "127.0.0.1"  # what a Flow sends to is its IPv4 destination: loopback only here
CNP_TOS = 0xC0


def flow_of(builder: FrameBuilder, port: int = 0):
    src, dst, sport, ttl, pkey = builder.fields()
    return _wire.Flow(src, dst, sport, ttl, pkey, port)


@pytest.fixture
def udp_pair():
    """A datagram pair the receiver reads as it reads its raw socket. AF_UNIX, not UDP over
    loopback: a loopback datagram is delivered in a softirq, which a loaded machine defers
    to ksoftirqd, so a non-blocking read right after `send` could miss the tail of a burst
    (seen once under load); a unix datagram is in the peer's queue when `send` returns."""
    tx, rx = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    tx.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    tx.settimeout(5)  # a full queue fails the test instead of hanging it
    rx.setblocking(False)
    yield tx, rx
    tx.close()
    rx.close()


# -- building --------------------------------------------------------------------

@FAST
@given(segments, st.integers(0, 0xFFFE), st.integers(0, 255), st.integers(1, 255))
def test_sender_builds_what_framebuilder_builds(seg: Segment, ip_id: int, tos: int,
                                                 ttl: int) -> None:
    builder = FrameBuilder(A, B, 0xC123, ttl=ttl, pkey=0x8001)
    sender = _wire.Sender(2, 4160)
    done, _, last = sender.add(flow_of(builder), [seg], 0, 0, tos, CNP_TOS, ip_id)
    want_tos = CNP_TOS if seg.opcode == Opcode.CNP else tos
    assert (done, last) == (1, ip_id + 1)
    assert sender.datagram(0) == bytes(builder.build(seg, ip_id + 1, want_tos))


def test_sender_ip_ident_skips_zero_and_fills_up_to_capacity() -> None:
    builder = FrameBuilder(A, B, 0xC000)
    sender = _wire.Sender(3, 4160)
    segs = [Segment(Opcode.SEND_ONLY, 1, psn) for psn in range(5)]
    assert sender.add(flow_of(builder), segs, 0, 0, 0, 0, 0xFFFE) == (3, 0, 2)  # 0xFFFF, 1, 2
    assert sender.count == 3 and sender.room == 0
    assert [parse(memoryview(sender.datagram(i))).psn for i in range(3)] == [0, 1, 2]
    assert sender.datagram(1)[4:6] == b"\x00\x01"
    with pytest.raises(ValueError, match="opcode 3"):  # not an opcode the engine speaks
        _wire.Sender(1, 4160).add(flow_of(builder), [Segment(3, 1, 0)], 0, 0, 0, 0, 1)


@FAST
@given(st.sampled_from([Opcode.WRITE_MIDDLE, Opcode.SEND_MIDDLE, Opcode.READ_RESPONSE_MIDDLE]),
       u24, u24, st.integers(1, 40), st.sampled_from([256, 1024]), st.integers(-1, 50),
       st.integers(0, 0xFFFE), st.integers(1, 8))
def test_a_run_builds_what_its_segments_build(op, qpn, psn, packets, mtu, fill_at, ip_id,
                                              capacity) -> None:
    """A Run (many MIDDLE packets, one object) is exactly its Segments, also when the
    batch fills in the middle of it (PSNs wrapping at 2**24 included)."""
    builder = FrameBuilder(A, B, 0xC000)
    fill = (psn + fill_at) & 0xFFFFFF if fill_at >= 0 else -1
    run = Run(op, qpn, psn, packets, fill, mtu, memoryview(bytes(range(256)) * (packets * mtu // 256)))
    want, ident = [], ip_id
    for seg in run.segments():
        ident = (ident + 1) & 0xFFFF or 1
        want.append(bytes(builder.build(seg, ident, 2)))
    sender, got, item, sub, ident = _wire.Sender(capacity, 4160), [], 0, 0, ip_id
    flow = flow_of(builder)
    while item == 0:
        item, sub, ident = sender.add(flow, [run], 0, sub, 2, CNP_TOS, ident)
        got += [sender.datagram(i) for i in range(sender.count)]
        _discard(sender)
    assert got == want and ident == (ip_id + packets - 1) % 0xFFFF + 1


def _discard(sender) -> None:
    closed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    fd = closed.fileno()
    closed.close()
    with pytest.raises(OSError):
        sender.send(fd)  # an error empties the batch


def test_a_run_must_be_whole_middle_packets() -> None:
    flow, sender = flow_of(FrameBuilder(A, B, 0xC000)), _wire.Sender(4, 4160)
    with pytest.raises(ValueError, match="Run"):  # payload not packets x mtu
        sender.add(flow, [Run(Opcode.WRITE_MIDDLE, 1, 0, 2, -1, 256, memoryview(bytes(500)))],
                   0, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="Run"):  # WRITE FIRST carries a RETH
        sender.add(flow, [Run(Opcode.WRITE_FIRST, 1, 0, 1, -1, 256, memoryview(bytes(256)))],
                   0, 0, 0, 0, 0)
    assert sender.count == 0


# -- sending ---------------------------------------------------------------------


def test_sender_delivers_each_datagram_once_in_order(loopback_udp) -> None:
    tx, rx = loopback_udp
    builder = FrameBuilder(A, LO, 0xC000, max_payload=4096)
    flow = flow_of(builder, rx.getsockname()[1])
    segs = [Segment(Opcode.WRITE_MIDDLE, 0x12, psn, payload=bytes([psn]) * (100 * psn + 1))
            for psn in range(1, 7)]
    sender = _wire.Sender(4, 4160)
    assert sender.add(flow, segs, 0, 0, 2, 0, 0) == (4, 0, 4)
    want = [bytes(builder.build(s, i + 1, 2)) for i, s in enumerate(segs)]
    assert sender.send(tx) == (4, 0, sum(map(len, want[:4])))
    assert sender.add(flow, segs, 4, 0, 2, 0, 4) == (6, 0, 6)
    assert sender.send(tx.fileno()) == (2, 0, sum(map(len, want[4:])))
    assert sender.count == 0 and sender.send(tx) == (0, 0, 0)
    assert [rx.recv(65536) for _ in segs] == want


def test_sender_keeps_what_the_kernel_refuses() -> None:
    """A full socket (EAGAIN, as a paused port's ENOBUFS) keeps the rest, in order.

    A TCP connection nobody reads stands in for the paused port: TCP ignores
    the datagrams' addresses, and its send buffer fills."""
    with socket.create_server((LO, 0)) as server, \
            socket.create_connection(server.getsockname()) as tx:
        tx.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        tx.setblocking(False)
        builder = FrameBuilder(A, LO, 0xC000, max_payload=4096)
        flow = flow_of(builder, server.getsockname()[1])
        sender, sent = _wire.Sender(64, 4160), 0
        segs = [Segment(Opcode.WRITE_MIDDLE, 1, psn, payload=bytes([psn]) * 4000)
                for psn in range(64)]
        sender.add(flow, segs, 0, 0, 0, 0, 0)
        sent, refused, _ = sender.send(tx)
        assert refused == 64 - sent == sender.count > 0
        assert parse(memoryview(sender.datagram(0))).psn == sent  # the first refused on
        assert sender.send(tx) == (0, refused, 0)  # still full: nothing lost, nothing sent


def test_sender_raises_other_errors_and_empties() -> None:
    sender = _wire.Sender(2, 4160)
    sender.add(flow_of(FrameBuilder(A, LO, 0xC000), 9), [Segment(Opcode.SEND_ONLY, 1, 1)],
               0, 0, 0, 0, 0)
    closed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    fd = closed.fileno()
    closed.close()
    with pytest.raises(OSError) as info:
        sender.send(fd)
    assert info.value.errno == errno.EBADF and sender.count == 0


# -- receiving -------------------------------------------------------------------

def _burst(tx: socket.socket, rx: socket.socket, datagrams: list[bytes], limit: int = 64):
    for d in datagrams:
        tx.send(d)
    return _wire.Receiver(64, 8192).recv(rx, limit)


@FAST
@given(st.lists(st.tuples(segments, st.integers(0, 255), st.booleans()), min_size=1,
                max_size=8))
def test_receiver_parses_and_checks_as_the_reference(udp_pair, cases) -> None:
    tx, rx = udp_pair
    builder = FrameBuilder(A, B, 0xC000)
    datagrams = []
    for i, (seg, tos, corrupt) in enumerate(cases):
        d = bytearray(builder.build(seg, i + 1, tos))
        if corrupt:
            d[len(d) // 2] ^= 0x10
        datagrams.append(bytes(d))
    good, bad, count, nbytes, malformed = _burst(tx, rx, datagrams)
    want_good, want_bad = [], []
    for d in datagrams:
        try:
            ref = parse(memoryview(d))
        except Exception:  # a flipped bit in a header: malformed for both
            continue
        (want_good if check_in_place(bytearray(d), len(d)) else want_bad).append(ref)
    assert (count, nbytes) == (len(datagrams), sum(map(len, datagrams)))
    assert malformed == len(datagrams) - len(want_good) - len(want_bad)
    assert [_plain(s) for s in good] == [_plain(s) for s in want_good]
    assert [_plain(s) for s in bad] == [_plain(s) for s in want_bad]
    assert all(type(s) is Segment for s in good + bad)


def _plain(seg: Segment) -> tuple:
    return (*seg[:9], bytes(seg.payload), *seg[10:])


def test_receiver_on_the_rxe_captures(udp_pair, all_frames) -> None:
    tx, rx = udp_pair
    frames = [f[14:] for f in all_frames]  # without Ethernet
    receiver, verdicts = _wire.Receiver(32, 8192), []
    for i in range(0, len(frames), 32):
        for f in frames[i:i + 32]:
            tx.send(f)
        good, bad, count, _, malformed = receiver.recv(rx, 32)
        assert count == len(frames[i:i + 32]) and malformed == 0
        verdicts += [True] * len(good) + [False] * len(bad)
        assert [_plain(s) for s in good + bad] == [  # order within a kind is kept
            _plain(parse(memoryview(f))) for f in frames[i:i + 32] if check_icrc(f)] + [
            _plain(parse(memoryview(f))) for f in frames[i:i + 32] if not check_icrc(f)]
    assert verdicts.count(False) == 1 and len(verdicts) == len(frames)  # the corrupted one


def test_receiver_counts_malformed_and_truncated(udp_pair) -> None:
    tx, rx = udp_pair
    ok = bytes(FrameBuilder(A, B, 0xC000, max_payload=4096).build(
        Segment(Opcode.WRITE_MIDDLE, 5, 9, payload=b"x" * 4096), 1))
    for d in (b"short", b"\x46" + ok[1:], ok):
        tx.send(d)
    good, bad, count, _, malformed = _wire.Receiver(8, 4096).recv(rx, 8)  # ok is 4140 B
    assert (len(good), len(bad), count, malformed) == (0, 0, 3, 3)
    assert _wire.Receiver(8, 4096).recv(rx, 8) == ([], [], 0, 0, 0)  # empty: no wait


def test_each_datagram_of_a_burst_keeps_its_own_payload(udp_pair) -> None:
    """Payloads are views of one ring: the burst's must not share a buffer."""
    tx, rx = udp_pair
    builder = FrameBuilder(A, B, 0xC000)
    datagrams = [bytes(builder.build(Segment(Opcode.WRITE_MIDDLE, 1, i,
                                             payload=bytes([i]) * 1024), i + 1))
                 for i in range(40)]
    good, *_ = _burst(tx, rx, datagrams, limit=32)
    assert [bytes(s.payload) for s in good] == [bytes([i]) * 1024 for i in range(32)]


def test_pure_env_forces_the_python_path(monkeypatch) -> None:
    monkeypatch.setenv(wire.PURE_ENV, "1")
    assert wire.compiled() is None and wire.name() == "python"
    monkeypatch.setenv(wire.PURE_ENV, "0")
    assert wire.compiled() is _wire and wire.name() == "compiled"


# -- placement: in-order MIDDLE payloads straight into memory -------------------------

SRC = int.from_bytes(socket.inet_aton(A), "big")


def _middles(psns, mtu=256, qpn=7, tos=2, op=Opcode.WRITE_MIDDLE, corrupt=()):
    builder = FrameBuilder(A, B, 0xC000)
    out = []
    for i, psn in enumerate(psns):
        d = bytearray(builder.build(Segment(op, qpn, psn & 0xFFFFFF,
                                            payload=bytes([psn & 0xFF]) * mtu), i + 1, tos))
        if i in corrupt:
            d[-1] ^= 1
        out.append(bytes(d))
    return out


def _target(psn, dest, offset=0, mtu=256, op=Opcode.WRITE_MIDDLE, src=SRC):
    return [int(op), src, psn, dest, offset, mtu, 1, 0, 0]


def test_in_order_middles_are_placed_not_returned(udp_pair) -> None:
    """PSNs wrap at 2**24 on the way; placed bytes land at offset on, in order."""
    tx, rx = udp_pair
    dest = bytearray(256 * 8)
    first = (1 << 24) - 2
    t = _target(first, memoryview(dest), offset=256)
    good, bad, count, _, _ = _burst(tx, rx, _middles(range(first, first + 5)), limit=64)
    assert (len(good), bad, count) == (5, [], 5)  # without targets: returned
    for d in _middles(range(first, first + 5)):
        tx.send(d)
    good, bad, count, _, _ = _wire.Receiver(64, 8192).recv(rx, 64, {7: [t]})
    assert (good, bad, count) == ([], [], 5)
    assert (t[2], t[4], t[6:]) == ((first + 5) & 0xFFFFFF, 6 * 256, [1, 5, 5 * 256])
    assert dest == bytes(256) + b"".join(bytes([p & 0xFF]) * 256 for p in range(first, first + 5)) \
        + bytes(256 * 2)


@pytest.mark.parametrize("case", ["gap", "ce", "bad_icrc", "other_src", "too_big"])
def test_the_first_unplaceable_datagram_closes_its_qp(udp_pair, case) -> None:
    """What Python sees of a QP comes after what was placed: from the first datagram
    that is not placed on (a gap, a CE mark, a bad ICRC, another source, no room)."""
    tx, rx = udp_pair
    dest = bytearray(256 * (2 if case == "too_big" else 8))
    t = _target(10, memoryview(dest), src=SRC + (case == "other_src"))
    psns = [10, 11, 13, 14] if case == "gap" else [10, 11, 12, 13]
    datagrams = _middles(psns, corrupt=(2,) if case == "bad_icrc" else ())
    if case == "ce":
        ce = bytearray(datagrams[2])
        ce[1] |= 3  # a switch marked it: TOS is outside the ICRC
        datagrams[2] = bytes(ce)
    for d in datagrams:
        tx.send(d)
    good, bad, *_ = _wire.Receiver(64, 8192).recv(rx, 64, {7: [t]})
    placed = 0 if case == "other_src" else 2
    assert t[7] == placed and t[6] == 0 and t[2] == 10 + placed
    assert sorted(s.psn for s in good + bad) == psns[placed:]
    assert len(bad) == (case == "bad_icrc")
    if case == "ce":
        assert good[0].ecn == 3  # handed over as it came, for the CNP


def test_a_missing_build_falls_back_with_one_warning(monkeypatch, caplog) -> None:
    import importlib

    def missing(name: str):
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(importlib, "import_module", missing)
    monkeypatch.setattr(wire, "_state", {})
    monkeypatch.delenv(wire.PURE_ENV, raising=False)
    with caplog.at_level("WARNING", logger="rocelab.engine"):
        assert wire.compiled() is None and wire.compiled() is None and wire.name() == "python"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "not built" in lines[0] and "\n" not in lines[0]


@pytest.mark.parametrize("pure", ["1", "0", None])
def test_engine_daemons_get_the_forced_path_as_a_flag(monkeypatch, pure) -> None:
    """Helpers start with a minimal environment (procs.base_env): ROCELAB_ENGINE_PURE=1
    reaches each engine daemon as --pure, which sets it again inside."""
    from types import SimpleNamespace

    from emulator.engine import client

    seen: list[list[str]] = []

    def start(lab, argv, **how):
        seen.append(argv)
        return "helper"

    if pure is None:
        monkeypatch.delenv(wire.PURE_ENV, raising=False)
    else:
        monkeypatch.setenv(wire.PURE_ENV, pure)
    monkeypatch.setattr(client.procs, "start", start)
    monkeypatch.setattr(client.procs, "wait_ready", lambda pending, timeout: None)
    monkeypatch.setattr(client, "_alive", lambda path: False)
    monkeypatch.setattr(client, "sock_path", lambda plan, host: Path("/nonexistent/x/engine.sock"))
    monkeypatch.setattr(client.rundirs, "make_private_dir", lambda path, exist_ok: None)
    monkeypatch.setattr(client, "for_host", lambda plan, host: SimpleNamespace(to_json=lambda: "{}"))
    host = SimpleNamespace(name="h1", address="10.0.0.1", addresses=["10.0.0.1"], netns="ns")
    client.ensure_engines(SimpleNamespace(lab="lab"), [host])  # type: ignore[arg-type]
    assert ("--pure" in seen[0]) == (pure == "1")
