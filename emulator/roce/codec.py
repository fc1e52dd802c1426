"""Readable RoCEv2 codec: whole frames to and from dataclasses.

This is the reference codec for tests, tools and pcaps: every header is a
declarative `Layout` (see headers.py), every field is kept, and
`encode(decode(b)) == b` for any frame it accepts. The engine's per-packet
path is `fastpath.py`, which is tested against this module.

A frame is an IPv4 datagram (optionally inside Ethernet): IPv4 without
options, UDP to port 4791, BTH, the extension header its opcode calls for
(RETH, AETH or the CNP's reserved bytes), payload, PadCnt zero bytes and the
4-byte ICRC.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from emulator.roce.errors import MalformedPacket
from emulator.roce.headers import (
    ETHERTYPE_IPV4,
    EXT_HEADER,
    IPPROTO_UDP,
    ROCE_UDP_PORT,
    Bth,
    Ethernet,
    ExtHeader,
    IPv4,
    Opcode,
    Udp,
    ipv4_checksum,
)
from emulator.roce.icrc import ICRC_SIZE, IPV4_HEADER, UDP_HEADER, icrc

ETH_HEADER = 14
_BTH_END = IPV4_HEADER + UDP_HEADER + Bth.LAYOUT.size
_MIN_DATAGRAM = _BTH_END + ICRC_SIZE


@dataclass(frozen=True)
class Frame:
    """One RoCEv2 packet, every header field explicit.

    `None` in `ip.total_length`, `ip.checksum`, `udp.length` or `icrc` means
    "compute it on encode"; decoded frames carry the values seen on the wire,
    so a corrupted ICRC survives a round trip. `trailer` holds Ethernet
    padding found after the IP datagram.
    """

    ip: IPv4
    udp: Udp
    bth: Bth
    ext: ExtHeader | None = None
    payload: bytes = b""
    icrc: int | None = None
    eth: Ethernet | None = None
    trailer: bytes = b""

    @property
    def opcode(self) -> Opcode:
        return Opcode(self.bth.opcode)


def encode(frame: Frame) -> bytes:
    """Wire bytes: an Ethernet frame if `frame.eth` is set, else an IPv4 datagram."""
    body = frame.bth.to_bytes()
    if frame.ext is not None:
        body += frame.ext.to_bytes()
    body += frame.payload + bytes(frame.bth.pad_count)
    udp_len = UDP_HEADER + len(body) + ICRC_SIZE
    udp = frame.udp if frame.udp.length is not None else dataclasses.replace(
        frame.udp, length=udp_len)
    datagram = _ip_header(frame.ip, IPV4_HEADER + udp_len) + udp.to_bytes() + body
    crc = frame.icrc
    if crc is None:
        crc = icrc(datagram + bytes(ICRC_SIZE))
    datagram += crc.to_bytes(ICRC_SIZE, "little")
    if frame.eth is None:
        return datagram
    return frame.eth.to_bytes() + datagram + frame.trailer


def _ip_header(ip: IPv4, total_length: int) -> bytes:
    if ip.total_length is None:
        ip = dataclasses.replace(ip, total_length=total_length)
    if ip.checksum is not None:
        return ip.to_bytes()
    raw = dataclasses.replace(ip, checksum=0).to_bytes()
    return dataclasses.replace(ip, checksum=ipv4_checksum(raw)).to_bytes()


def decode(data: bytes | bytearray | memoryview, *, ethernet: bool = False) -> Frame:
    """Parse one frame; anything that is not RoCEv2 raises `MalformedPacket`.

    With `ethernet=False` the input must be exactly one IPv4 datagram (what a
    raw IP socket returns); with `ethernet=True` bytes after the datagram are
    kept as Ethernet padding.
    """
    data = bytes(data)
    eth = None
    if ethernet:
        eth = Ethernet.from_bytes(data)
        if eth.ethertype != ETHERTYPE_IPV4:
            raise MalformedPacket(f"ethertype {eth.ethertype:#06x} is not IPv4")
        data = data[ETH_HEADER:]
    ip = _decode_ip(data, exact=not ethernet)
    datagram, trailer = data[: ip.total_length], data[ip.total_length:]
    udp = _decode_udp(datagram)
    bth = Bth.from_bytes(datagram[IPV4_HEADER + UDP_HEADER:])
    ext, payload = _decode_body(bth, datagram[_BTH_END:-ICRC_SIZE])
    crc = int.from_bytes(datagram[-ICRC_SIZE:], "little")
    return Frame(ip, udp, bth, ext, payload, crc, eth, trailer)


def _decode_ip(data: bytes, exact: bool) -> IPv4:
    ip = IPv4.from_bytes(data)
    if ip.version != 4 or ip.ihl != 5:
        raise MalformedPacket(f"IP version {ip.version} IHL {ip.ihl}: need IPv4 without options")
    if ip.protocol != IPPROTO_UDP:
        raise MalformedPacket(f"IP protocol {ip.protocol} is not UDP")
    if ip.mf or ip.frag_offset:
        raise MalformedPacket("IP fragment")
    assert ip.total_length is not None
    if ip.total_length < _MIN_DATAGRAM or ip.total_length > len(data):
        raise MalformedPacket(f"IP total length {ip.total_length} for {len(data)} bytes")
    if exact and ip.total_length != len(data):
        raise MalformedPacket(f"IP total length {ip.total_length} for {len(data)} bytes")
    return ip


def _decode_udp(datagram: bytes) -> Udp:
    udp = Udp.from_bytes(datagram[IPV4_HEADER:])
    if udp.dport != ROCE_UDP_PORT:
        raise MalformedPacket(f"UDP port {udp.dport} is not RoCEv2 ({ROCE_UDP_PORT})")
    if udp.length != len(datagram) - IPV4_HEADER:
        raise MalformedPacket(f"UDP length {udp.length} in a {len(datagram)}-byte datagram")
    return udp


def _decode_body(bth: Bth, body: bytes) -> tuple[ExtHeader | None, bytes]:
    """Split what lies between BTH and ICRC into extension header and payload."""
    try:
        ext_type = EXT_HEADER[Opcode(bth.opcode)]
    except ValueError:
        raise MalformedPacket(f"unsupported BTH opcode {bth.opcode:#04x}") from None
    ext = None
    if ext_type is not None:
        ext = ext_type.from_bytes(body)
        body = body[ext_type.LAYOUT.size:]
    if bth.pad_count > len(body):
        raise MalformedPacket(f"pad count {bth.pad_count} exceeds {len(body)} payload bytes")
    return ext, body[: len(body) - bth.pad_count]
