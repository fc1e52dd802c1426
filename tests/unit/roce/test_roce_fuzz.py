"""Property tests: the decoders fail only with MalformedPacket, and the two
codecs round-trip whatever the builder can produce."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulator.roce import sockfilter
from emulator.roce.codec import decode, encode
from emulator.roce.errors import MalformedPacket
from emulator.roce.fastpath import FrameBuilder, Segment, parse
from emulator.roce.headers import EXT_HEADER, Aeth, Opcode, Reth
from emulator.roce.icrc import check_icrc

FAST = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

u24 = st.integers(0, (1 << 24) - 1)
segments = st.builds(
    Segment,
    opcode=st.sampled_from(list(Opcode)), dest_qp=u24, psn=u24, ackreq=st.booleans(),
    va=st.integers(0, (1 << 64) - 1), rkey=st.integers(0, (1 << 32) - 1),
    dma_length=st.integers(0, (1 << 32) - 1), syndrome=st.integers(0, 255), msn=u24,
    payload=st.binary(max_size=300), becn=st.booleans(),
)


def _built(seg: Segment) -> bytes:
    if seg.opcode == Opcode.CNP:
        seg = seg._replace(payload=b"")
    return bytes(FrameBuilder("192.0.2.1", "192.0.2.2", 0xD00D).build(seg, 42, 0x03))


def _decoders_only_raise_malformed(data: bytes) -> None:
    for call in (lambda: decode(data), lambda: decode(data, ethernet=True),
                 lambda: parse(memoryview(data))):
        try:
            call()
        except MalformedPacket:
            pass


@FAST
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_malformed(data: bytes) -> None:
    _decoders_only_raise_malformed(data)


@FAST
@given(segments, st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=6),
       st.integers(0, 400))
def test_mutated_valid_packets_only_raise_malformed(seg, flips, cut) -> None:
    data = bytearray(_built(seg))
    for pos, value in flips:
        if pos < len(data):
            data[pos] = value
    _decoders_only_raise_malformed(bytes(data))
    _decoders_only_raise_malformed(bytes(data[:cut]))


def _as_parsed(seg: Segment) -> Segment:
    """What parse() reports for `seg` built by _built(): fields of extension
    headers the opcode does not carry read as 0, plus ECN and source from IP."""
    has_reth = EXT_HEADER[Opcode(seg.opcode)] is Reth
    has_aeth = EXT_HEADER[Opcode(seg.opcode)] is Aeth
    return seg._replace(
        va=seg.va if has_reth else 0, rkey=seg.rkey if has_reth else 0,
        dma_length=seg.dma_length if has_reth else 0,
        syndrome=seg.syndrome if has_aeth else 0, msn=seg.msn if has_aeth else 0,
        payload=b"" if seg.opcode == Opcode.CNP else seg.payload, ecn=3, src_ip=0xC0000201)


@FAST
@given(segments)
def test_built_packets_parse_back_and_reencode_identically(seg: Segment) -> None:
    wire = _built(seg)
    assert check_icrc(wire)
    got = parse(memoryview(wire))
    assert got._replace(payload=bytes(got.payload)) == _as_parsed(seg)
    assert encode(decode(wire)) == wire


@FAST
@given(segments, st.sampled_from([0, 1, 2, 3]))
def test_only_roce_datagrams_pass_the_socket_filter(seg: Segment, variant: int) -> None:
    wire = bytearray(_built(seg))
    if variant == 1:
        wire[22:24] = (4792).to_bytes(2, "big")  # another UDP port
    elif variant == 2:
        wire[9] = 6  # TCP
    elif variant == 3:
        wire[6] |= 0x20  # more fragments
    accepted = sockfilter.run(sockfilter.ROCE_ONLY, bytes(wire)) > 0
    assert accepted == (variant == 0)
    assert sockfilter.run(sockfilter.DROP_ALL, bytes(wire)) == 0


def _udp_to_4791(payload: bytes) -> bytes:
    """An IPv4 header (no options) and a UDP header to 4791 in front of `payload`."""
    udp = (0xC000).to_bytes(2, "big") + (4791).to_bytes(2, "big") \
        + (8 + len(payload)).to_bytes(2, "big") + b"\0\0"
    ip = bytes([0x45, 0]) + (28 + len(payload)).to_bytes(2, "big") + b"\0\0\0\0" \
        + bytes([64, 17]) + b"\0\0" + bytes(8)
    return ip + udp + payload


@pytest.mark.parametrize("payload, rc, mrc", [
    (b"", True, False),  # no opcode byte: RC's parser counts it malformed (the engine fuzz)
    (bytes([0x0A]) + bytes(11), True, False),  # RDMA WRITE ONLY
    (bytes([0xE0]) + bytes(11), False, True),  # MRC_WRITE
    (bytes([0xE5]) + bytes(11), False, True),  # MRC_PROBE_REPLY
    (bytes([0xE6]) + bytes(11), True, False),  # above MRC's range
])
def test_rc_and_mrc_sockets_split_4791_by_opcode(payload: bytes, rc: bool, mrc: bool) -> None:
    wire = _udp_to_4791(payload)
    assert (sockfilter.run(sockfilter.ROCE_ONLY, wire) > 0) == rc
    assert (sockfilter.run(sockfilter.MRC_ONLY, wire) > 0) == mrc
