"""Cross-check against an independent implementation: scapy.contrib.roce.

scapy has BTH, AETH and the ICRC but no RETH, so the test adds a RETH layer
and binds it to the opcodes that carry one. Then scapy dissects what the
engine builds, recomputes the ICRC itself, and builds packets the engine
parses.
"""

from __future__ import annotations

import pytest

scapy_roce = pytest.importorskip("scapy.contrib.roce")

from scapy.fields import IntField, XIntField, XLongField  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.packet import Packet, Raw, bind_layers  # noqa: E402

from emulator.roce.fastpath import FrameBuilder, Segment, parse  # noqa: E402
from emulator.roce.headers import Opcode, Syndrome  # noqa: E402
from emulator.roce.icrc import check_icrc  # noqa: E402

BTH, AETH = scapy_roce.BTH, scapy_roce.AETH


class RETH(Packet):
    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dlen", 0)]


for _op in (Opcode.WRITE_FIRST, Opcode.WRITE_ONLY, Opcode.READ_REQUEST):
    bind_layers(BTH, RETH, opcode=int(_op))
for _op in (Opcode.READ_RESPONSE_FIRST, Opcode.READ_RESPONSE_LAST, Opcode.READ_RESPONSE_ONLY):
    bind_layers(BTH, AETH, opcode=int(_op))

VA, RKEY = 0x7F0012345000, 0x2AE
PAYLOAD = bytes(range(256)) * 4
CASES = [
    Segment(Opcode.WRITE_FIRST, 0xABCD, 100, False, VA, RKEY, 3072, payload=PAYLOAD),
    Segment(Opcode.WRITE_MIDDLE, 0xABCD, 101, payload=PAYLOAD),
    Segment(Opcode.WRITE_LAST, 0xABCD, 102, True, payload=PAYLOAD),
    Segment(Opcode.WRITE_ONLY, 0xABCD, 0xFFFFFF, True, VA, RKEY, 64, payload=PAYLOAD[:64]),
    Segment(Opcode.READ_REQUEST, 0xABCD, 7, False, VA, RKEY, 1 << 20),
    Segment(Opcode.READ_RESPONSE_FIRST, 0x11, 7, syndrome=Syndrome.ACK, msn=3, payload=PAYLOAD),
    Segment(Opcode.ACK, 0x11, 102, syndrome=Syndrome.ACK, msn=1),
    Segment(Opcode.ACK, 0x11, 55, syndrome=Syndrome.NAK_PSN_SEQUENCE_ERROR, msn=9),
    Segment(Opcode.SEND_ONLY, 0x11, 9, True, payload=b"hello"),
    Segment(Opcode.CNP, 0x11, 0, becn=True),
]


def engine_bytes(seg: Segment) -> bytes:
    return bytes(FrameBuilder("10.0.0.1", "10.0.0.2", 0xC0DE).build(seg, 0x1234, 0x02))


@pytest.mark.parametrize("seg", CASES, ids=lambda s: Opcode(s.opcode).name)
def test_scapy_dissects_engine_packets(seg: Segment) -> None:
    pkt = IP(engine_bytes(seg))
    bth = pkt[BTH]
    assert (bth.opcode, bth.dqpn, bth.psn, bth.ackreq) == (seg.opcode, seg.dest_qp, seg.psn,
                                                           int(seg.ackreq))
    assert (pkt.flags.DF, pkt.ttl, pkt.tos, pkt.id, pkt[UDP].dport) == (1, 64, 2, 0x1234, 4791)
    if RETH in pkt:
        assert (pkt[RETH].va, pkt[RETH].rkey, pkt[RETH].dlen) == (seg.va, seg.rkey,
                                                                  seg.dma_length)
    if AETH in pkt:
        assert (pkt[AETH].syndrome, pkt[AETH].msn) == (seg.syndrome, seg.msn)
    if seg.opcode == Opcode.CNP:
        assert bth.becn == 1


@pytest.mark.parametrize("seg", CASES, ids=lambda s: Opcode(s.opcode).name)
def test_scapy_computes_the_same_icrc(seg: Segment) -> None:
    ours = engine_bytes(seg)
    pkt = IP(ours)
    pkt[BTH].icrc = None  # make scapy compute it from the packet
    assert bytes(pkt) == ours


def test_engine_parses_scapy_built_write_only() -> None:
    payload = b"kv-cache block!!"
    pkt = (IP(src="10.1.0.1", dst="10.1.0.2", flags="DF", tos=0x02, id=77)
           / UDP(sport=49441, dport=4791, chksum=0)
           / BTH(opcode=int(Opcode.WRITE_ONLY), dqpn=0x11, psn=0xFFFFFE, ackreq=1)
           / RETH(va=VA, rkey=RKEY, dlen=len(payload)) / Raw(payload))
    wire = bytes(pkt)
    assert check_icrc(wire)
    seg = parse(memoryview(wire))
    assert (seg.opcode, seg.dest_qp, seg.psn, seg.ackreq) == (Opcode.WRITE_ONLY, 0x11,
                                                              0xFFFFFE, True)
    assert (seg.va, seg.rkey, seg.dma_length, bytes(seg.payload)) == (VA, RKEY, len(payload),
                                                                      payload)
    rebuilt = FrameBuilder("10.1.0.1", "10.1.0.2", 49441).build(seg, 77, 0x02)
    assert bytes(rebuilt) == wire


def test_engine_parses_scapy_built_ack() -> None:
    pkt = (IP(src="10.1.0.2", dst="10.1.0.1", flags="DF", id=9) / UDP(sport=1, chksum=0)
           / BTH(opcode=int(Opcode.ACK), dqpn=0x22, psn=5) / AETH(syndrome=0x1F, msn=4))
    wire = bytes(pkt)
    seg = parse(memoryview(wire))
    assert check_icrc(wire) and (seg.syndrome, seg.msn, seg.psn) == (0x1F, 4, 5)
