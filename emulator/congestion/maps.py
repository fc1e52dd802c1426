"""The BPF maps' layouts (mirroring fabric.bpf.c) and a reader for other processes."""

from __future__ import annotations

import json
import mmap
import os
import struct
from dataclasses import dataclass

from ..paths import lab_run_dir
from ..plan import Interface, Kind, Node, Plan
from ..plan.congestion import ROCE_TC, TCS, CongestionPlan
from . import libbpf

MAX_PORTS = 4096
NTC = 8
CFG = struct.Struct("=4I8I8I8I8I8I5I8I")
STAT = struct.Struct("=qqQQQQQQQQQIIQQQ")
STAT_FIELDS = ("queued", "buffered", "max_queued", "max_buffered", "tx_packets", "tx_bytes",
               "ecn_capable", "ce_marked", "rx_ce", "pause_tx", "pause_rx", "paused", "pad",
               "trim", "tx_trim", "dropped_trim")
# The entry before trimming's counters (captures taken then): read with the trim counters 0.
LEGACY_STAT = struct.Struct("=qqQQQQQQQQQII")
PMAX_ONE = 0xFFFFFFFF


def unpack_stat(buf: bytes | mmap.mmap, index: int, layout: struct.Struct = STAT) -> dict[str, int]:
    """Entry `index` (port * NTC + tc) of a stats map copy laid out as `layout`: every field of
    STAT_FIELDS but the padding (the trim counters 0 in a LEGACY_STAT copy)."""
    values = dict.fromkeys(STAT_FIELDS, 0)
    values.update(zip(STAT_FIELDS, layout.unpack_from(buf, index * layout.size)))
    values.pop("pad")
    return values


def pack_cfg(plan: Plan, node: Node, peer_port: int, peer_host: bool = False,
             trim: bool = True) -> bytes:
    """One port's cfg entry; `peer_host`: the port faces a host (a trim there is last-hop);
    `trim`: False leaves trimming off on it even when the plan turns it on."""
    cp = plan.congestion
    assert cp is not None
    switch = node.is_router
    kmin, kmax, pmax, xoff, xon = ([0] * NTC for _ in range(5))
    for tc in cp.ecn_tcs:
        kmin[tc], kmax[tc], pmax[tc] = cp.kmin, cp.kmax, int(cp.pmax * PMAX_ONE)
    xoff[ROCE_TC], xon[ROCE_TC] = cp.xoff, cp.xon
    return CFG.pack(peer_port, int(switch), int(switch and cp.ecn_on(node.name)),
                    int(switch and cp.pfc_on(node.name)), *kmin, *kmax, *pmax, *xoff, *xon,
                    *_trim_cfg(cp, switch and trim, peer_host))


def _trim_cfg(cp: CongestionPlan, switch: bool, peer_host: bool) -> list[int]:
    """peer_host, trim_size, trim_dscp, trim_tc, trim_limit, trim_threshold[NTC]."""
    t = cp.trim
    if t is None or not switch:
        return [int(peer_host)] + [0] * (4 + NTC)
    threshold = [t.threshold if tc in t.tcs else 0 for tc in range(NTC)]
    return [int(peer_host), t.size, t.dscp, t.tc, cp.buffer_bytes, *threshold]


@dataclass
class PortTc:
    node: str
    port: str
    tc: int
    values: dict[str, int]


class StatsReader:
    """Reads the per (port, TC) counters of a running lab from the shared map."""

    def __init__(self, plan: Plan):
        self.plan = plan
        meta = json.loads((lab_run_dir(plan.lab) / "bpf.json").read_text())
        self._fd = libbpf.map_fd_by_id(meta["maps"]["stats"])
        size = STAT.size * MAX_PORTS * NTC
        page = os.sysconf("SC_PAGE_SIZE")
        self._mm = libbpf.mmap_array(self._fd, (size + page - 1) // page * page)

    def read(self, tcs: tuple[int, ...] = TCS) -> list[PortTc]:
        out = []
        for node in self.plan.nodes:
            for port in node.interfaces:
                for tc in tcs:
                    values = unpack_stat(self._mm, port.port_id * NTC + tc)
                    out.append(PortTc(node.name, port.name, tc, values))
        return out

    def close(self) -> None:
        self._mm.close()
        os.close(self._fd)


def peer_faces_host(plan: Plan, port: Interface) -> bool:
    """Whether the node at the other end of `port` is a host (a trim there is last-hop)."""
    return plan.node(port.peer).kind is Kind.HOST


def _cfg_fd(plan: Plan) -> int:
    meta = json.loads((lab_run_dir(plan.lab) / "bpf.json").read_text())
    return libbpf.map_fd_by_id(meta["maps"]["cfg"])


def set_ecn(plan: Plan, node: Node, enabled: bool) -> None:
    """Turn RED marking on or off on every port of a switch, live."""
    _patch(plan, node, 8, struct.pack("=I", int(enabled and node.is_router)))  # ecn_on


TRIM_OFF = CFG.size - 4 * (4 + NTC)  # trim_size, the first trimming field (after peer_host)


def set_trimming(plan: Plan, node: Node, enabled: bool) -> None:
    """Turn trimming on (as the plan has it) or off on every port of a switch, live."""
    fd = _cfg_fd(plan)
    try:
        for port in node.interfaces:
            peer = plan.node(port.peer).interface(port.peer_ifname)
            planned = pack_cfg(plan, node, peer.port_id, peer_faces_host(plan, port),
                               trim=enabled)
            raw = bytearray(libbpf.lookup(fd, port.port_id, CFG.size))
            raw[TRIM_OFF:] = planned[TRIM_OFF:]
            libbpf.update(fd, port.port_id, bytes(raw))
    finally:
        os.close(fd)


def _patch(plan: Plan, node: Node, offset: int, value: bytes) -> None:
    """Overwrite `value` at `offset` in the cfg entry of every port of `node`, live."""
    fd = _cfg_fd(plan)
    try:
        for port in node.interfaces:
            raw = bytearray(libbpf.lookup(fd, port.port_id, CFG.size))
            raw[offset:offset + len(value)] = value
            libbpf.update(fd, port.port_id, bytes(raw))
    finally:
        os.close(fd)
