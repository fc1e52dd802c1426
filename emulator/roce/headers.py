"""RoCEv2 header definitions: opcodes, AETH syndromes and header layouts.

Field names and widths follow the IBTA specification (vol. 1, ch. 9, and
annex A17 for RoCEv2) and match scapy.contrib.roce and Wireshark's
packet-infiniband.c, so a reader can hold the three side by side.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from emulator.roce.layout import Field, Header, Layout, ipv4_field, mac_field

ROCE_UDP_PORT = 4791
ETHERTYPE_IPV4 = 0x0800
IPPROTO_UDP = 17
DEFAULT_PKEY = 0xFFFF
_TEN_WORDS = struct.Struct("!10H")


class Opcode(IntEnum):
    """BTH opcodes of the Reliable Connection transport, plus RoCEv2 CNP."""

    SEND_FIRST = 0x00
    SEND_MIDDLE = 0x01
    SEND_LAST = 0x02
    SEND_ONLY = 0x04
    WRITE_FIRST = 0x06
    WRITE_MIDDLE = 0x07
    WRITE_LAST = 0x08
    WRITE_ONLY = 0x0A
    READ_REQUEST = 0x0C
    READ_RESPONSE_FIRST = 0x0D
    READ_RESPONSE_MIDDLE = 0x0E
    READ_RESPONSE_LAST = 0x0F
    READ_RESPONSE_ONLY = 0x10
    ACK = 0x11
    CNP = 0x81


class Syndrome(IntEnum):
    """AETH syndromes this engine sends. Bits 6-5 give the kind (see `AckKind`)."""

    ACK = 0x1F  # ACK, "invalid credit count": no end-to-end credits, as rxe sends
    RNR_NAK = 0x20  # low 5 bits carry the RNR timer (sent only with counted receives)
    NAK_PSN_SEQUENCE_ERROR = 0x60
    NAK_INVALID_REQUEST = 0x61
    NAK_REMOTE_ACCESS_ERROR = 0x62
    NAK_REMOTE_OPERATIONAL_ERROR = 0x63
    NAK_INVALID_RD_REQUEST = 0x64


class AckKind(IntEnum):
    """Bits 6-5 of an AETH syndrome: what kind of acknowledgement it is."""

    ACK = 0
    RNR_NAK = 1
    RESERVED = 2
    NAK = 3


def ack_kind(syndrome: int) -> AckKind:
    return AckKind(syndrome >> 5 & 3)


class Ecn(IntEnum):
    """The two low bits of the IPv4 TOS byte (RFC 3168)."""

    NOT_ECT = 0b00
    ECT1 = 0b01
    ECT0 = 0b10
    CE = 0b11


@dataclass(frozen=True)
class Ethernet(Header):
    dst: str
    src: str
    ethertype: int = ETHERTYPE_IPV4
    LAYOUT = Layout("Ethernet", mac_field("dst"), mac_field("src"), Field("ethertype", 16))


@dataclass(frozen=True)
class IPv4(Header):
    """IPv4 without options. `None` length/checksum are computed on encode."""

    src: str
    dst: str
    ident: int = 0
    dscp: int = 0
    ecn: int = Ecn.ECT0
    ttl: int = 64
    df: int = 1
    total_length: int | None = None
    checksum: int | None = None
    version: int = 4
    ihl: int = 5
    reserved_flag: int = 0
    mf: int = 0
    frag_offset: int = 0
    protocol: int = IPPROTO_UDP
    LAYOUT = Layout(
        "IPv4", Field("version", 4), Field("ihl", 4), Field("dscp", 6), Field("ecn", 2),
        Field("total_length", 16), Field("ident", 16), Field("reserved_flag", 1),
        Field("df", 1), Field("mf", 1), Field("frag_offset", 13), Field("ttl", 8),
        Field("protocol", 8), Field("checksum", 16), ipv4_field("src"), ipv4_field("dst"),
    )


@dataclass(frozen=True)
class Udp(Header):
    """UDP header. RoCEv2 senders put 0 in the checksum (rxe does)."""

    sport: int
    dport: int = ROCE_UDP_PORT
    length: int | None = None
    checksum: int = 0
    LAYOUT = Layout("UDP", Field("sport", 16), Field("dport", 16), Field("length", 16),
                    Field("checksum", 16))


@dataclass(frozen=True)
class Bth(Header):
    """Base Transport Header, 12 bytes, on every RoCEv2 packet."""

    opcode: int
    dest_qp: int
    psn: int
    ackreq: int = 0
    solicited: int = 0
    migreq: int = 0
    pad_count: int = 0
    tver: int = 0
    pkey: int = DEFAULT_PKEY
    fecn: int = 0
    becn: int = 0
    resv6: int = 0
    resv7: int = 0
    LAYOUT = Layout(
        "BTH", Field("opcode", 8), Field("solicited", 1), Field("migreq", 1),
        Field("pad_count", 2), Field("tver", 4), Field("pkey", 16), Field("fecn", 1),
        Field("becn", 1), Field("resv6", 6), Field("dest_qp", 24), Field("ackreq", 1),
        Field("resv7", 7), Field("psn", 24),
    )


@dataclass(frozen=True)
class Reth(Header):
    """RDMA Extended Transport Header: where in the remote memory, and how much."""

    va: int
    rkey: int
    dma_length: int
    LAYOUT = Layout("RETH", Field("va", 64), Field("rkey", 32), Field("dma_length", 32))


@dataclass(frozen=True)
class Aeth(Header):
    """ACK Extended Transport Header: syndrome and message sequence number."""

    syndrome: int
    msn: int
    LAYOUT = Layout("AETH", Field("syndrome", 8), Field("msn", 24))


@dataclass(frozen=True)
class CnpReserved(Header):
    """The 16 reserved (zero) bytes that follow the BTH of a RoCEv2 CNP."""

    reserved: int = 0
    LAYOUT = Layout("CNP", Field("reserved", 128))


ExtHeader = Reth | Aeth | CnpReserved

# Which extension header follows the BTH, per opcode (IBTA table 39).
EXT_HEADER: dict[Opcode, type[ExtHeader] | None] = {
    Opcode.SEND_FIRST: None, Opcode.SEND_MIDDLE: None,
    Opcode.SEND_LAST: None, Opcode.SEND_ONLY: None,
    Opcode.WRITE_FIRST: Reth, Opcode.WRITE_MIDDLE: None,
    Opcode.WRITE_LAST: None, Opcode.WRITE_ONLY: Reth,
    Opcode.READ_REQUEST: Reth,
    Opcode.READ_RESPONSE_FIRST: Aeth, Opcode.READ_RESPONSE_MIDDLE: None,
    Opcode.READ_RESPONSE_LAST: Aeth, Opcode.READ_RESPONSE_ONLY: Aeth,
    Opcode.ACK: Aeth,
    Opcode.CNP: CnpReserved,
}

# Extension header length per raw opcode value, for the hot path.
EXT_LENGTH: dict[int, int] = {
    int(op): (ext.LAYOUT.size if ext else 0) for op, ext in EXT_HEADER.items()
}


def udp_source_port(lqpn: int, rqpn: int) -> int:
    """The UDP source port Linux rxe uses for a QP pair (ECMP entropy).

    rdma_flow_label_to_udp_sport(rdma_calc_flow_label(lqpn, rqpn)): fold the
    product of the QP numbers to 20 bits, then to 14, and set the top two
    bits so the port lands in 0xC000-0xFFFF.
    """
    fl = lqpn * rqpn
    fl ^= fl >> 20
    fl ^= fl >> 40
    fl &= 0xFFFFF
    return ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)) | 0xC000


def ipv4_checksum(header: bytes | bytearray | memoryview) -> int:
    """RFC 791 header checksum of a 20-byte header whose checksum field is zero."""
    s = sum(_TEN_WORDS.unpack_from(header))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def pad_count(payload_length: int) -> int:
    """Pad bytes that bring a payload to a multiple of 4 (BTH PadCnt)."""
    return -payload_length % 4
