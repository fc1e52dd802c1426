"""Host-to-host reachability with real ICMP echo, from inside each host namespace.

One raw ICMP socket per host namespace, opened by a thread that entered the
namespace (sockets stay where they were born), then driven from a single
thread with select(): a full mesh of a 32-host fabric is ~1000 echoes and
takes milliseconds, where `ping` subprocesses would take minutes.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import time
from collections.abc import Callable
from contextlib import ExitStack

from . import netns
from .hosts import kind_of
from .plan import Node

ICMP_ECHO_REQUEST = 8
ICMP_ECHO_REPLY = 0
RESEND_S = 0.2


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def echo_request(ident: int, seq: int) -> bytes:
    payload = b"rocelab-reach"
    header = struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, 0, ident, seq)
    csum = _checksum(header + payload)
    return struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, csum, ident, seq) + payload


def parse_reply(packet: bytes) -> tuple[int, int] | None:
    """(ident, seq) of an IPv4 echo reply, or None for anything else."""
    if len(packet) < 28:
        return None
    ihl = (packet[0] & 0x0F) * 4
    kind, _, _, ident, seq = struct.unpack_from("!BBHHH", packet, ihl)
    return (ident, seq) if kind == ICMP_ECHO_REPLY else None


def _open_socket(host: Node) -> socket.socket:
    with netns.entered(host.netns):
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.setblocking(False)
    return s


Answered = Callable[[int, int], None]  # (pairs answered or not probed so far, pairs in all)
FULL_MESH_MAX = 4096  # pairs: up to 64 hosts every host pings every other


def probe_pairs(hosts: list[Node], full_mesh_max: int = FULL_MESH_MAX) -> list[tuple[str, str]]:
    """The (src, dst) pairs a reachability check pings (pure).

    A full mesh while it is small. Beyond that (576 hosts: 331,200 pairs) a cover that
    still exercises every path routing can get wrong: one pair for every ordered pair
    of leaves (hosts taken in turn, so every host sends and answers), and a ring among
    each leaf's own hosts.
    """
    names = [h.name for h in hosts]
    if len(hosts) * (len(hosts) - 1) <= full_mesh_max:
        return [(s, d) for s in names for d in names if s != d]
    by_leaf: dict[str, list[str]] = {}
    for h in hosts:
        by_leaf.setdefault(h.leaf or h.name, []).append(h.name)
    leaves = list(by_leaf)
    turn = dict.fromkeys(leaves, 0)

    def take(leaf: str) -> str:
        group = by_leaf[leaf]
        turn[leaf] += 1
        return group[(turn[leaf] - 1) % len(group)]

    pairs = [(take(a), take(b)) for a in leaves for b in leaves if a != b]
    for group in by_leaf.values():
        if len(group) > 1:
            pairs += [(group[i], group[(i + 1) % len(group)]) for i in range(len(group))]
    return pairs


def _targets(hosts: list[Node], every_nic: bool) -> tuple[list[tuple[str, str]], dict[str, list[int]]]:
    """(host, address) each echo goes to, its index the echo's sequence number: a host's
    own address, or (every_nic) each of its NICs'; and host -> its targets' indexes."""
    targets = [(h.name, ip) for h in hosts
               for ip in (h.addresses if every_nic and h.addresses else [h.address or ""])]
    of: dict[str, list[int]] = {}
    for i, (name, _) in enumerate(targets):
        of.setdefault(name, []).append(i)
    return targets, of


def unreachable_pairs(hosts: list[Node], timeout_s: float = 1.0,
                      pairs: list[tuple[str, str]] | None = None,
                      answered: Answered | None = None,
                      every_nic: bool = False) -> list[tuple[str, str]]:
    """Ping the (src, dst) `pairs` (default: probe_pairs, a full mesh of a small lab);
    return the pairs that got no reply. `answered(done, total)` each time more replied.
    `every_nic` (a multi-plane fabric): every address of dst must answer, so every plane
    is checked."""
    if len(hosts) < 2:
        return []
    pairs = pairs if pairs is not None else probe_pairs(hosts)
    base = os.getpid() & 0x7FFF
    idents = {(base + i) & 0xFFFF: h for i, h in enumerate(hosts)}
    targets, of = _targets(hosts, every_nic)
    # a host whose namespace cannot send (an rxe host's gave its address to its guest)
    # still answers
    silent = {h.name for h in hosts if not kind_of(h).probes_reach}
    pending = {(src, t) for src, dst in pairs if src not in silent for t in of[dst]}
    told = _teller(answered, len(pending) + sum(len(of[d]) for s, d in pairs if s in silent))
    with ExitStack() as stack:
        socks = {}
        for ident, h in idents.items():
            if h.name in silent:
                continue
            socks[ident] = stack.enter_context(_open_socket(h))
        by_fd = {s.fileno(): ident for ident, s in socks.items()}
        poller = select.poll()
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        ident_of = {h.name: ident for ident, h in idents.items()}
        deadline = time.monotonic() + timeout_s
        next_send = 0.0
        while pending and time.monotonic() < deadline:
            if time.monotonic() >= next_send:
                for src, t in pending:
                    pkt = echo_request(ident_of[src], t)
                    socks[ident_of[src]].sendto(pkt, (targets[t][1], 0))
                next_send = time.monotonic() + RESEND_S
            for fd, _ in poller.poll(20):  # poll, not select: hundreds of hosts' fds pass 1024
                _drain(socks[by_fd[fd]], idents, len(targets), pending)
            told(len(pending))
    return sorted({(src, targets[t][0]) for src, t in pending})


def _teller(answered: Answered | None, total: int) -> Callable[[int], None]:
    """`answered`, told only when the count of pairs still pending changed."""
    last = [-1]

    def tell(pending: int) -> None:
        if answered is not None and pending != last[0]:
            last[0] = pending
            answered(total - pending, total)
    return tell


def _drain(sock: socket.socket, idents: dict[int, Node], targets: int,
           pending: set[tuple[str, int]]) -> None:
    while True:
        try:
            packet = sock.recv(2048)
        except BlockingIOError:
            return
        reply = parse_reply(packet)
        if reply and reply[0] in idents and reply[1] < targets:
            pending.discard((idents[reply[0]].name, reply[1]))
