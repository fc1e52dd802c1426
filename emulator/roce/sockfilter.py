"""Classic BPF socket filters for the RoCEv2 transport sockets.

A raw IPPROTO_UDP socket sees every UDP datagram the namespace receives; the
`ROCE_ONLY` filter keeps only unfragmented ones to port 4791, so the kernel
drops the rest before they are queued and the engine never wakes for them.
`DROP_ALL` goes on the UDP socket bound to 4791 that exists only so the
kernel does not answer RoCE datagrams with ICMP port-unreachable.

Instructions are written the way the kernel's linux/filter.h spells them
(class | size | mode), so each line reads like `tcpdump -d` output.
"""

from __future__ import annotations

import ctypes
import socket
from enum import IntEnum

from emulator.roce.headers import IPPROTO_UDP, ROCE_UDP_PORT

SO_ATTACH_FILTER = 26


class Bpf(IntEnum):
    """linux/bpf_common.h instruction fields."""

    LD = 0x00
    LDX = 0x01
    JMP = 0x05
    RET = 0x06
    W = 0x00
    H = 0x08
    B = 0x10
    K = 0x00
    ABS = 0x20
    IND = 0x40
    MSH = 0xA0
    JEQ = 0x10
    JGE = 0x30
    JSET = 0x40


_ACCEPT = 0x40000  # bytes of the packet to keep: all of it
Insn = tuple[int, int, int, int]  # code, jt, jf, k

MRC_FIRST, MRC_END = 0xE0, 0xE6  # MRC's BTH opcodes (docs/mrc.md), which RC never sees


def _roce(mrc: bool) -> tuple[Insn, ...]:
    """Unfragmented UDP to 4791 whose BTH opcode is (mrc) or is not (RC) an MRC one."""
    in_range = (0, 1) if mrc else (1, 0)  # opcode in MRC_FIRST..MRC_END-1: accept / drop
    return (
        (Bpf.LD | Bpf.B | Bpf.ABS, 0, 0, 9),  # A = IP protocol
        (Bpf.JMP | Bpf.JEQ | Bpf.K, 0, 11, IPPROTO_UDP),  # not UDP -> drop
        (Bpf.LD | Bpf.H | Bpf.ABS, 0, 0, 6),  # A = flags + fragment offset
        (Bpf.JMP | Bpf.JSET | Bpf.K, 9, 0, 0x3FFF),  # MF or offset -> drop
        (Bpf.LDX | Bpf.B | Bpf.MSH, 0, 0, 0),  # X = IP header length
        (Bpf.LD | Bpf.H | Bpf.IND, 0, 0, 2),  # A = UDP destination port
        (Bpf.JMP | Bpf.JEQ | Bpf.K, 0, 6, ROCE_UDP_PORT),  # not 4791 -> drop
        (Bpf.LD | Bpf.H | Bpf.IND, 0, 0, 4),  # A = UDP length
        # no opcode byte (a load past the end would drop it unseen): RC's parser counts
        # it malformed, MRC leaves it
        (Bpf.JMP | Bpf.JGE | Bpf.K, 0, 3 + mrc, 9),
        (Bpf.LD | Bpf.B | Bpf.IND, 0, 0, 8),  # A = BTH opcode
        (Bpf.JMP | Bpf.JGE | Bpf.K, 1 + mrc, 0, MRC_END),  # above MRC's -> RC: accept, MRC: drop
        (Bpf.JMP | Bpf.JGE | Bpf.K, *in_range, MRC_FIRST),
        (Bpf.RET | Bpf.K, 0, 0, _ACCEPT),
        (Bpf.RET | Bpf.K, 0, 0, 0),  # drop
    )


# Offsets are from the IPv4 header: raw sockets filter at the network header.
ROCE_ONLY = _roce(mrc=False)  # RC's socket: RoCEv2 but not MRC
MRC_ONLY = _roce(mrc=True)  # the MRC endpoint's socket

DROP_ALL: tuple[Insn, ...] = ((Bpf.RET | Bpf.K, 0, 0, 0),)


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8),
                ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def attach(sock: socket.socket, program: tuple[Insn, ...]) -> None:
    """Attach a classic BPF program to `sock` (the kernel copies it)."""
    insns = (_SockFilter * len(program))(*(_SockFilter(*i) for i in program))
    prog = _SockFprog(len(program), insns)
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, bytes(prog))


def run(program: tuple[Insn, ...], packet: bytes) -> int:
    """Interpret `program` over `packet` in Python (for tests without root).

    Implements only the instructions used above; returns the RET value.
    """
    a = x = pc = 0
    while True:
        code, jt, jf, k = program[pc]
        if code == Bpf.RET | Bpf.K:
            return k
        if code & 0x07 == Bpf.LDX:
            x = (packet[k] & 0xF) * 4
        elif code & 0x07 == Bpf.LD:
            off = k + (x if code & 0xE0 == Bpf.IND else 0)
            size = 1 if code & 0x18 == Bpf.B else 2
            if off + size > len(packet):
                return 0  # the kernel drops on an out-of-bounds load
            a = int.from_bytes(packet[off:off + size], "big")
        else:
            op = code & 0xF0
            hit = a == k if op == Bpf.JEQ else a >= k if op == Bpf.JGE else bool(a & k)
            pc += jt if hit else jf
        pc += 1
