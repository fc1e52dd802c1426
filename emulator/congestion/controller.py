"""The lab's congestion controller: one process that owns the BPF dataplane.

    python -m emulator.congestion.controller --lab LAB

It compiles and loads the fabric BPF object once, fills its maps, shapes
every port (qos.py) and attaches the programs in every namespace, so one map
set serves the whole fabric. Then it only reacts: XOFF/XON events from the
ring buffer pause or resume the upstream neighbour's lossless class and put
a real 802.1Qbb frame on the wire. Statistics are read by other processes
straight from the mmap-able map (ids in <run dir>/bpf.json): polling here
would wreck the reaction time.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import logging
import os
import signal
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from pyroute2 import IPRoute

from .. import netns, state
from ..histogram import PFC_REACTION_BUCKETS, Histogram
from ..paths import lab_run_dir
from ..plan import Interface, Node, Plan
from ..plan.congestion import ROCE_TC
from . import libbpf, qos
from .maps import MAX_PORTS, pack_cfg, peer_faces_host

log = logging.getLogger("rocelab.controller")
SOURCE = Path(__file__).parent / "bpf" / "fabric.bpf.c"
EVENT = struct.Struct("=QIIII")
REPORT_EVERY_S = 1.0
REACTION_WINDOW = 10000  # reactions kept for the quantiles (pfc.json); the histograms count all
RT_PRIORITY = 10
NICE_FALLBACK = -10
PAUSE_QUANTA = 0xFFFF


@dataclass
class PortRef:
    node: Node
    port: Interface


class Reaction(NamedTuple):
    """What an event on one (port, TC) sends, prebuilt."""

    switch: socket.socket  # netlink, in the upstream neighbour's namespace
    pause: bytes  # RTM_NEWQDISC: the upstream port's lossless TBF to a crawl
    resume: bytes  # ... and back to line rate
    raw: socket.socket  # the congested port: the 802.1Qbb frame goes out here
    up_raw: socket.socket  # the upstream port: the kick frame that restarts its TBF
    xoff_frame: bytes
    xon_frame: bytes
    kick: bytes
    name: str  # "node:port:tc" of the paused upstream class


class Controller:
    def __init__(self, plan: Plan):
        assert plan.congestion is not None
        self.plan, self.cp = plan, plan.congestion
        self.run_dir = lab_run_dir(plan.lab)
        self.ports = {p.port_id: PortRef(n, p) for n in plan.nodes for p in n.interfaces}
        self.nl: dict[str, socket.socket] = {}
        self.switches: dict[int, tuple[socket.socket, bytes, bytes]] = {}
        self.raw: dict[int, socket.socket] = {}
        self.paused_since: dict[tuple[int, int], float] = {}
        self.paused_s: dict[str, float] = {}
        self.reactions_us: list[float] = []
        self._encoded: list[str] = []  # reactions_us[:len(_encoded)] as JSON numbers
        self.reactions: dict[tuple[int, int], Reaction] = {}
        # every reaction since the controller started, per event: a Prometheus histogram
        self.reaction_hist = {e: Histogram.empty(PFC_REACTION_BUCKETS) for e in ("xoff", "xon")}
        self.pauses = 0
        self.sched = "normal"  # the reacting thread's scheduling (serve: prioritise)
        self._rb: int | None = None

    def setup(self) -> None:
        bad = sorted(pid for pid in self.ports if not 0 < pid < MAX_PORTS)
        if bad:  # the program's port is its filter's classid, < MAX_PORTS (12 bits in tc_index)
            raise libbpf.BpfError(f"port ids {bad} outside 1..{MAX_PORTS - 1}")
        obj_path = libbpf.compile_object(SOURCE, self.run_dir / "fabric.bpf.o")
        self.obj = libbpf.BpfObject(obj_path)
        self._fill_maps()
        eg, ing = self.obj.prog_fd("fabric_egress"), self.obj.prog_fd("fabric_ingress")
        for node in self.plan.nodes:
            with netns.entered(node.netns), IPRoute() as ipr:
                for port in node.interfaces:
                    qos.apply_port(ipr, port.name, qos.of_port(self.cp, port.speed_bps),
                                   self.plan.port_mtu(port), eg, ing, port.port_id)
                    raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
                    raw.bind((port.name, 0))
                    self.raw[port.port_id] = raw
            for port in node.interfaces:
                self._switch(node, port)  # prebuild every pause switch now, not on the hot path
            qos.keep_order(node.netns, [p.name for p in node.interfaces])
        for pid in self.ports:  # every lossless port's reaction, before any event
            self._reaction(pid, ROCE_TC)
        libbpf.update(self.obj.map_fd("armed"), 0, struct.pack("=I", 1))  # every port: count
        ids = {name: libbpf.map_id(self.obj.map_fd(name)) for name in ("cfg", "stats", "dscp_tc")}
        (self.run_dir / "bpf.json").write_text(json.dumps({"maps": ids, "ports": len(self.ports)}))

    def _fill_maps(self) -> None:
        cfg = self.obj.map_fd("cfg")
        for pid, ref in self.ports.items():
            peer = self.plan.node(ref.port.peer).interface(ref.port.peer_ifname)
            libbpf.update(cfg, pid, pack_cfg(self.plan, ref.node, peer.port_id,
                                             peer_faces_host(self.plan, ref.port)))
        dscp = self.obj.map_fd("dscp_tc")
        for value, tc in self.cp.dscp_tc().items():
            libbpf.update(dscp, value, struct.pack("=I", tc))

    # -- reacting ---------------------------------------------------------------

    def on_event(self, _ctx: int, data: int, size: int) -> int:
        ts, port, tc, xoff, held = EVENT.unpack(ctypes.string_at(data, EVENT.size))
        r = self.reactions.get((port, tc)) or self._reaction(port, tc)
        if r is None:
            return 0
        r.switch.send(r.pause if xoff else r.resume)
        now = time.monotonic_ns()
        self.reactions_us.append((now - ts) / 1000)
        self.reaction_hist["xoff" if xoff else "xon"].observe((now - ts) / 1e9)
        r.raw.send(r.xoff_frame if xoff else r.xon_frame)
        key = (port, tc)
        if xoff:
            self.pauses += 1
            self.paused_since[key] = now / 1e9
        else:
            r.up_raw.send(r.kick)
            start = self.paused_since.pop(key, now / 1e9)
            self.paused_s[r.name] = self.paused_s.get(r.name, 0.0) + now / 1e9 - start
        return 0

    def _reaction(self, port: int, tc: int) -> Reaction | None:
        """Everything one (port, TC)'s events send, built once: the per-event work is
        three sends and the bookkeeping (a lookup per event cost ~30 us of Python)."""
        ref = self.ports.get(port)
        if ref is None:
            return None
        upstream = self.plan.node(ref.port.peer)
        up_port = upstream.interface(ref.port.peer_ifname)
        sock, pause, resume = self._switch(upstream, up_port)
        r = Reaction(sock, pause, resume, self.raw[port], self.raw[up_port.port_id],
                     qos.pfc_frame(ref.port.mac, tc, PAUSE_QUANTA), qos.pfc_frame(ref.port.mac, tc, 0),
                     qos.kick_frame(up_port.mac, ref.port.mac, self.cp.roce_dscp),
                     f"{upstream.name}:{up_port.name}:{tc}")
        self.reactions[(port, tc)] = r
        return r

    def _switch(self, node: Node, port: Interface) -> tuple[socket.socket, bytes, bytes]:
        """The netlink socket in node's namespace and the port's prebuilt pause/resume."""
        if port.port_id not in self.switches:
            if node.name not in self.nl:
                with netns.entered(node.netns):
                    self.nl[node.name] = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
                self.nl[node.name].setblocking(False)
            with netns.entered(node.netns):
                idx = socket.if_nametoindex(port.name)
            self.switches[port.port_id] = (self.nl[node.name],
                                           *qos.pause_messages(
                                               idx, qos.of_port(self.cp, port.speed_bps),
                                               self.plan.port_mtu(port)))
        return self.switches[port.port_id]

    def report(self) -> None:
        now = time.monotonic_ns() / 1e9
        paused = dict(self.paused_s)
        for (port, tc), start in self.paused_since.items():  # still paused: count so far
            ref = self.ports[port]
            up = self.plan.node(ref.port.peer)
            name = f"{up.name}:{ref.port.peer_ifname}:{tc}"
            paused[name] = paused.get(name, 0.0) + now - start
        data = {"pauses": self.pauses,
                "reaction_hist": {e: h.to_json() for e, h in self.reaction_hist.items()},
                "paused_s": paused, "active_pauses": len(self.paused_since), "at": time.time(),
                "cpu_s": round(time.process_time(), 4), "sched": self.sched}
        text = json.dumps(data)[:-1] + f', "reaction_us": [{self._reaction_window()}]}}'
        tmp = self.run_dir / "pfc.json.tmp"
        tmp.write_text(text)
        tmp.replace(self.run_dir / "pfc.json")

    def _reaction_window(self) -> str:
        """The last REACTION_WINDOW reactions as JSON numbers, encoding only those since
        the last report: json.dumps of 10,000 floats took ~4.5 ms, and a reaction that
        arrived meanwhile waited for it (the histograms keep counting every one)."""
        self._encoded += [f"{us:.1f}" for us in self.reactions_us[len(self._encoded):]]
        drop = len(self.reactions_us) - REACTION_WINDOW
        if drop > 0:
            del self.reactions_us[:drop]
            del self._encoded[:drop]
        return ",".join(self._encoded)

    def poll(self, timeout_ms: int) -> None:
        """React to the ring buffer's events for up to timeout_ms (serve's loop; tests)."""
        if self._rb is None:
            self._callback = libbpf.RingCallback(self.on_event)  # held: libbpf calls it later
            self._rb = libbpf.lib().ring_buffer__new(self.obj.map_fd("events"), self._callback,
                                                     None, None)
            if not self._rb:
                raise libbpf.BpfError("ring_buffer__new failed")
        libbpf.lib().ring_buffer__poll(self._rb, timeout_ms)

    def close(self) -> None:
        """Release the ring buffer, sockets and BPF object (filters stay while their ports do)."""
        if self._rb is not None:
            libbpf.lib().ring_buffer__free(self._rb)
            self._rb = None
        for sock in [*self.raw.values(), *self.nl.values()]:
            sock.close()
        self.raw.clear()
        self.nl.clear()
        self.switches.clear()
        if hasattr(self, "obj"):
            self.obj.close()

    def serve(self) -> None:
        self.poll(0)
        self.sched = prioritise()
        gc.freeze()  # setup's objects: a full collection no longer walks them mid-reaction
        (self.run_dir / "controller.ready").write_text("ok\n")
        stop = {"now": False}
        signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
        next_report = 0.0
        while not stop["now"]:
            self.poll(50)
            if time.monotonic() >= next_report:
                self.report()
                next_report = time.monotonic() + REPORT_EVERY_S
        self.report()


def prioritise() -> str:
    """Put the reacting thread ahead of the lab's other processes: SCHED_FIFO at
    RT_PRIORITY (above every normal task: engines, FRR, a busy core; below the kernel's
    threaded IRQs at 50), reset on fork. It sleeps in epoll between events, and the
    kernel's RT throttling caps it at 95 % of a CPU should it ever spin. Where the kernel
    refuses (no CAP_SYS_NICE, a cgroup without an RT budget): nice NICE_FALLBACK."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK,
                              os.sched_param(RT_PRIORITY))
        return f"fifo:{RT_PRIORITY}"
    except OSError as e:
        log.warning("SCHED_FIFO refused (%s): nice %d instead", e.strerror, NICE_FALLBACK)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, NICE_FALLBACK)
        return f"nice:{NICE_FALLBACK}"
    except OSError as e:
        log.warning("nice %d refused (%s): normal priority", NICE_FALLBACK, e.strerror)
        return "normal"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lab", required=True)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    ctl = Controller(state.lab_plan(args.lab))
    ctl.setup()
    ctl.serve()


if __name__ == "__main__":
    main()
