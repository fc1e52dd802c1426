"""The shipped Wireshark Lua dissector (emulator/tools/mrc.lua) under the real tshark, on a
pcap of MRC packets built by hand per docs/mrc.md "Wire format" (scapy for Ethernet/IPv4/
UDP, the BTH/MRCH/RETH/extensions packed here, the ICRC computed) beside a standard RoCEv2
RDMA WRITE from the project's codec. tshark reads a file: no namespace is needed."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from scapy.all import IP, UDP, Ether, raw  # type: ignore[attr-defined]

from emulator.roce.codec import Frame, encode
from emulator.roce.headers import Bth, Ethernet, IPv4, Opcode, Reth, Udp
from emulator.roce.icrc import icrc
from emulator.roce.pcap import write_pcap
from emulator.tools.capture import MRC_DISSECTOR

pytestmark = pytest.mark.skipif(not shutil.which("tshark"), reason="needs tshark")

SRC, DST = "10.0.0.1", "10.0.1.1"
MAC_A, MAC_B = "02:00:00:00:00:01", "02:00:00:00:00:02"
TRIMMED, LASTHOP, ACK_REQ = 0x1, 0x2, 0x4
RETH = struct.pack(">QII", 0x7F0000001000, 0x1234, 1024)


def mrc(op: int, ev: int, body: bytes = b"", flags: int = 0, sport: int | None = None,
        **mrch: int) -> bytes:
    """One MRC frame: BTH (dest connection 0xabcd), MRCH v1 (`mrch`: plane, msg, ext, psn
    over the defaults), `body`, then a correct ICRC; UDP source port = EV unless `sport`."""
    h = {"plane": 0, "msg": 3, "ts": 1000, "ext": 0, "psn": 7} | mrch
    bth = struct.pack(">BBHII", op, 0, 0xFFFF, 0xABCD,
                      (0x80000000 if flags & ACK_REQ else 0) | h["psn"])
    head = struct.pack(">BBHIII", 0x10 | flags, h["plane"], ev, h["msg"], h["ts"], h["ext"])
    dg = bytearray(raw(IP(src=SRC, dst=DST, tos=18 << 2, flags="DF")
                       / UDP(sport=ev if sport is None else sport, dport=4791, chksum=0)
                       / (bth + head + body + bytes(4))))
    dg[-4:] = icrc(bytes(dg)).to_bytes(4, "little")
    return raw(Ether(src=MAC_A, dst=MAC_B) / IP(bytes(dg)))


def trim(frame: bytes, size: int = 128, lasthop: bool = True) -> bytes:
    """What a trimming switch does (contract: docs/congestion.md): cut to `size` frame bytes,
    DSCP 11, IPv4 length/checksum and UDP length fixed, UDP checksum 0, MRCH TRIMMED set."""
    cut = bytearray(frame[:size])
    cut[54] |= TRIMMED | (LASTHOP if lasthop else 0)
    pkt = Ether(bytes(cut))
    pkt[IP].tos = 11 << 2
    del pkt[IP].len, pkt[IP].chksum, pkt[UDP].len
    pkt[UDP].chksum = 0
    return raw(pkt)


def roce_write() -> bytes:
    """A standard RoCEv2 RDMA WRITE Only, as the engine's codec builds it."""
    return encode(Frame(
        eth=Ethernet(dst=MAC_B, src=MAC_A), ip=IPv4(src=SRC, dst=DST, dscp=26), udp=Udp(50000),
        bth=Bth(opcode=Opcode.WRITE_ONLY, dest_qp=0x12, psn=5, ackreq=1),
        ext=Reth(va=0x1000, rkey=0x99, dma_length=512), payload=bytes(512)))


FIELDS = ("_ws.col.Protocol", "mrc.bth.opcode", "mrc.version", "mrc.ev", "mrc.plane",
          "mrc.msg", "mrc.timestamp", "mrc.flags.trimmed", "mrc.flags.lasthop",
          "mrc.flags.ack_req", "mrc.reth.va", "mrc.reth.len", "mrc.imm", "mrc.payload_len",
          "mrc.icrc", "mrc.sack.cum_ack", "mrc.sack.bitmap", "mrc.sack.ce",
          "mrc.sack.trigger_psn", "mrc.nack.code", "mrc.nack.cum_ack", "mrc.probe_seq",
          "infiniband.bth.opcode", "_ws.malformed", "_ws.expert.severity", "_ws.expert.message")
FRAMES = {  # name -> frame, in pcap order
    "write": mrc(0xE0, 49153, RETH + bytes(1024), plane=2, ext=1 << 20),
    "write_imm": mrc(0xE1, 49154, RETH[:12] + struct.pack(">II", 1000, 0xDEADBEEF) + bytes(1000),
                     flags=ACK_REQ, msg=4),
    "sack": mrc(0xE2, 49155, struct.pack(">QHHB", 0b101, 16, 2, 1) + (99).to_bytes(3, "big"),
                msg=2, psn=40),
    "nack": mrc(0xE3, 49156, bytes([2, 0, 0, 0]) + (38).to_bytes(4, "big"), psn=41),
    "probe": mrc(0xE4, 49157, ext=9, msg=0, psn=0),
    "reply": mrc(0xE5, 49157, ext=9, msg=0, psn=0),
    "trimmed": trim(mrc(0xE0, 49158, RETH + bytes(1024), plane=1)),
    "roce": roce_write(),
    "bad_ev": mrc(0xE0, 49159, RETH + bytes(64), sport=50001),
}


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> dict[str, dict[str, str]]:
    pcap = tmp_path_factory.mktemp("mrc") / "mrc.pcap"
    write_pcap(pcap, FRAMES.values())
    lines = tshark(pcap, "-X", f"lua_script:{MRC_DISSECTOR}", "-T", "fields", "-E", "occurrence=a",
                   *[a for f in FIELDS for a in ("-e", f)])
    assert len(lines) == len(FRAMES), lines
    return {name: dict(zip(FIELDS, line.split("\t"))) for name, line in zip(FRAMES, lines)}


def tshark(pcap: Path, *args: str) -> list[str]:
    done = subprocess.run(["tshark", "-r", str(pcap), "--disable-protocol", "rpcordma", *args],
                          capture_output=True, text=True, timeout=60, check=True)
    assert "Lua" not in done.stderr and "rror" not in done.stderr, done.stderr
    return done.stdout.splitlines()


def test_the_dissector_ships_in_the_package():
    assert MRC_DISSECTOR.is_file() and MRC_DISSECTOR.parent.name == "tools"


def test_data_packets_decode_mrch_and_reth(rows):
    w = rows["write"]
    assert (w["_ws.col.Protocol"], w["mrc.bth.opcode"], w["mrc.version"]) == ("MRC", "0xe0", "1")
    assert (w["mrc.ev"], w["mrc.plane"], w["mrc.msg"], w["mrc.timestamp"]) == \
        ("49153", "2", "3", "1000")
    assert (w["mrc.flags.trimmed"], w["mrc.flags.lasthop"], w["mrc.flags.ack_req"]) == \
        ("0", "0", "0")
    assert (w["mrc.reth.va"], w["mrc.reth.len"], w["mrc.payload_len"]) == \
        ("0x00007f0000001000", "1024", "1024")
    assert w["mrc.icrc"].startswith("0x")
    i = rows["write_imm"]
    assert (i["mrc.bth.opcode"], i["mrc.flags.ack_req"], i["mrc.imm"], i["mrc.payload_len"]) == \
        ("0xe1", "1", "0xdeadbeef", "1000")


def test_sack_nack_and_probes_decode_their_extensions(rows):
    s = rows["sack"]
    assert (s["mrc.sack.cum_ack"], s["mrc.sack.bitmap"], s["mrc.sack.ce"],
            s["mrc.sack.trigger_psn"], s["mrc.msg"]) == ("40", "0x0000000000000005", "2", "99", "2")
    n = rows["nack"]
    assert (n["mrc.bth.opcode"], n["mrc.nack.code"], n["mrc.nack.cum_ack"]) == ("0xe3", "2", "38")
    for name, op in (("probe", "0xe4"), ("reply", "0xe5")):
        assert (rows[name]["mrc.bth.opcode"], rows[name]["mrc.probe_seq"]) == (op, "9")


def test_a_trimmed_packet_dissects_without_error(rows):
    t = rows["trimmed"]
    assert len(FRAMES["trimmed"]) == 128
    assert (t["_ws.col.Protocol"], t["mrc.ev"], t["mrc.plane"]) == ("MRC", "49158", "1")
    assert (t["mrc.flags.trimmed"], t["mrc.flags.lasthop"]) == ("1", "1")
    assert (t["mrc.reth.len"], t["mrc.payload_len"], t["mrc.icrc"]) == ("1024", "42", "")
    assert not t["_ws.malformed"]
    assert t["_ws.expert.message"].startswith("Trimmed by a switch")  # a note, nothing worse
    assert t["_ws.expert.severity"] == str(0x00400000)  # PI_NOTE


def test_standard_roce_is_still_wiresharks_and_clean(rows):
    r = rows["roce"]
    assert (r["_ws.col.Protocol"], r["infiniband.bth.opcode"], r["mrc.bth.opcode"]) == \
        ("RRoCE", str(int(Opcode.WRITE_ONLY)), "")
    assert not r["_ws.malformed"] and not r["_ws.expert.severity"]


def test_only_the_expected_expert_infos(rows):
    """Clean MRC packets carry no expert info; an EV that is not the UDP source port does."""
    for name in ("write", "write_imm", "sack", "nack", "probe", "reply"):
        assert not rows[name]["_ws.expert.severity"] and not rows[name]["_ws.malformed"], name
    assert rows["bad_ev"]["_ws.expert.message"] == "EV differs from the UDP source port"
