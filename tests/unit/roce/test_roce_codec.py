"""Known-answer tests of the RoCEv2 codec against real rxe captures."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from emulator.roce.codec import ETH_HEADER, Frame, decode, encode
from emulator.roce.errors import FieldOverflow
from emulator.roce.fastpath import FrameBuilder, Segment, parse
from emulator.roce.headers import (
    EXT_HEADER,
    Aeth,
    Bth,
    CnpReserved,
    Ethernet,
    IPv4,
    Opcode,
    Reth,
    Syndrome,
    Udp,
    udp_source_port,
)
from emulator.roce.icrc import check_icrc, icrc
from emulator.roce.pcap import LinkType, read_pcap, write_pcap

RXE_WRITER, RXE_PP, PEER_PP = "10.99.2.1", "10.99.1.1", "10.99.1.2"


def recomputed(frame: Frame) -> Frame:
    """The frame with every derived field (lengths, checksum, ICRC) left to the encoder."""
    return dataclasses.replace(
        frame, icrc=None, udp=dataclasses.replace(frame.udp, length=None),
        ip=dataclasses.replace(frame.ip, total_length=None, checksum=None))


def segment_of(frame: Frame) -> Segment:
    """What the hot-path parser should report for a decoded frame."""
    reth = frame.ext if isinstance(frame.ext, Reth) else Reth(0, 0, 0)
    aeth = frame.ext if isinstance(frame.ext, Aeth) else Aeth(0, 0)
    src = int.from_bytes(bytes(map(int, frame.ip.src.split("."))), "big")
    return Segment(frame.bth.opcode, frame.bth.dest_qp, frame.bth.psn, bool(frame.bth.ackreq),
                   reth.va, reth.rkey, reth.dma_length, aeth.syndrome, aeth.msn,
                   frame.payload, bool(frame.bth.becn), frame.ip.ecn, src)


def test_fixture_contents_are_what_the_readme_says(write3k, pingpong) -> None:
    ops = Counter(decode(f, ethernet=True).opcode for f in write3k)
    assert ops == {Opcode.WRITE_FIRST: 5, Opcode.WRITE_MIDDLE: 5, Opcode.WRITE_LAST: 5,
                   Opcode.ACK: 5}
    ops = Counter(decode(f, ethernet=True).opcode for f in pingpong)
    assert ops == {Opcode.SEND_ONLY: 401, Opcode.ACK: 400}


def test_decode_then_encode_gives_identical_bytes(all_frames) -> None:
    for raw in all_frames:
        assert encode(decode(raw, ethernet=True)) == raw


def test_encoder_recomputes_lengths_checksum_and_icrc(all_frames) -> None:
    """Only the one corrupted frame differs, and only in its ICRC."""
    differing = []
    for i, raw in enumerate(all_frames):
        built = encode(recomputed(decode(raw, ethernet=True)))
        if built != raw:
            differing.append(i)
            assert built[:-4] == raw[:-4]
    assert len(differing) == 1


def test_icrc_accepts_every_valid_frame_and_rejects_the_corrupted_one(all_frames) -> None:
    rejected = [raw for raw in all_frames if not check_icrc(raw[ETH_HEADER:])]
    assert len(rejected) == 1
    frame = decode(rejected[0], ethernet=True)
    assert frame.ip.src == PEER_PP and frame.opcode is Opcode.SEND_ONLY


def test_icrc_is_least_significant_byte_first(write3k) -> None:
    datagram = write3k[0][ETH_HEADER:]
    assert datagram[-4:] == icrc(datagram).to_bytes(4, "little")
    assert datagram[-4:].hex() == "fb37e818"  # as Wireshark shows it: 0xfb37e818


def test_icrc_ignores_ecn_ttl_and_becn_but_covers_the_rest(write3k) -> None:
    datagram = bytearray(write3k[0][ETH_HEADER:])
    for offset, value in ((1, 0x03), (8, 0x3F), (10, 0x12), (26, 0x34), (32, 0x40)):
        changed = bytearray(datagram)
        changed[offset] = value
        assert check_icrc(changed), offset
    for offset in (0, 4, 12, 20, 28, 36, 60, len(datagram) - 5):
        changed = bytearray(datagram)
        changed[offset] ^= 0x01
        assert not check_icrc(changed), offset


def test_udp_source_port_rule() -> None:
    assert udp_source_port(0x11, 0x11) == 49441
    assert udp_source_port(0x11, 0xABCD) == 59568


def test_rxe_frames_use_the_source_port_rule(write3k, pingpong) -> None:
    for raw in write3k:
        assert decode(raw, ethernet=True).udp.sport == udp_source_port(0x11, 0x11)
    for raw in pingpong:
        frame = decode(raw, ethernet=True)
        if frame.ip.src == RXE_PP:
            assert frame.udp.sport == udp_source_port(0x11, 0xABCD)


def test_fastpath_parse_agrees_with_the_readable_decoder(all_frames) -> None:
    for raw in all_frames:
        assert parse(memoryview(raw)[ETH_HEADER:]) == segment_of(decode(raw, ethernet=True))


def test_frame_builder_reproduces_rxe_datagrams_byte_for_byte(all_frames) -> None:
    """rxe's own frames (IP ident counting, UDP checksum 0) rebuilt from their
    Segment by the hot-path builder come out identical, ICRC included."""
    rebuilt = 0
    for raw in all_frames:
        frame = decode(raw, ethernet=True)
        if frame.ip.src not in (RXE_WRITER, RXE_PP, "10.99.2.2"):
            continue
        builder = FrameBuilder(frame.ip.src, frame.ip.dst, frame.udp.sport)
        tos = frame.ip.dscp << 2 | frame.ip.ecn
        assert builder.build(segment_of(frame), frame.ip.ident, tos) == raw[ETH_HEADER:]
        rebuilt += 1
    assert rebuilt == 20 + 400


@pytest.mark.parametrize("payload_len", [0, 1, 2, 3, 4, 5, 1023, 4096])
def test_builder_and_encoder_agree_for_every_opcode(payload_len: int) -> None:
    """Same bytes from both codecs, padding included, for each opcode's headers."""
    payload = (bytes(range(256)) * 16)[:payload_len]
    builder = FrameBuilder("10.0.0.1", "10.0.0.2", 0xC123)
    for op in Opcode:
        data = bytes(0) if op == Opcode.CNP else payload
        seg = Segment(op, 0xABCD, 0xFFFFFF, True, 0x1122334455667788, 0xDEADBEEF, 77,
                      Syndrome.NAK_REMOTE_ACCESS_ERROR, 0x123456, data, op == Opcode.CNP)
        exts = {Reth: Reth(seg.va, seg.rkey, seg.dma_length),
                Aeth: Aeth(seg.syndrome, seg.msn), CnpReserved: CnpReserved()}
        kind = EXT_HEADER[op]
        frame = Frame(IPv4("10.0.0.1", "10.0.0.2", ident=0x4321, dscp=0xB9 >> 2, ecn=1),
                      Udp(0xC123),
                      Bth(op, 0xABCD, 0xFFFFFF, ackreq=1, becn=int(op == Opcode.CNP),
                          pad_count=-len(data) % 4),
                      exts[kind] if kind else None, data)
        built = bytes(builder.build(seg, 0x4321, 0xB9))
        assert built == encode(frame), op
        decoded = decode(built)
        assert (decoded.bth, decoded.ext, decoded.payload) == (frame.bth, frame.ext, data)


def test_cnp_layout() -> None:
    seg = Segment(Opcode.CNP, 0x11, 0, becn=True)
    datagram = bytes(FrameBuilder("10.0.0.1", "10.0.0.2", 0xC000).build(seg, 1, 48 << 2))
    frame = decode(datagram)
    assert len(datagram) == 20 + 8 + 12 + 16 + 4
    assert frame.bth.becn == 1 and frame.bth.opcode == 0x81 and frame.ip.dscp == 48
    assert datagram[40:56] == bytes(16) and check_icrc(datagram)


def test_header_layout_sizes() -> None:
    sizes = {h.__name__: h.LAYOUT.size for h in (Ethernet, IPv4, Udp, Bth, Reth, Aeth)}
    assert sizes == {"Ethernet": 14, "IPv4": 20, "Udp": 8, "Bth": 12, "Reth": 16, "Aeth": 4}


def test_encoding_a_field_that_does_not_fit_raises() -> None:
    with pytest.raises(FieldOverflow, match="BTH.psn"):
        Bth(Opcode.ACK, 1, 1 << 24).to_bytes()


def test_pcap_writer_round_trips(write3k, tmp_path: Path) -> None:
    path = tmp_path / "out.pcap"
    write_pcap(path, write3k, LinkType.ETHERNET)
    records = list(read_pcap(path))
    assert [r.data for r in records] == write3k and records[0].linktype == 1
