"""Kernel link counters of every port of a plan during a run (netlink, per namespace).

Every node's ports are read when the recorder is made and when it stops; the switches'
ports are also sampled every `interval` in between (hosts' ports are one hop from a
leaf port that is sampled). One NETLINK_ROUTE socket per node, opened in its namespace
once and reused: a sample of clos-2x4's six switches is one link dump each
(emulator/metrics/netlink.py decodes only the counters). `traffic.summarize` turns the
recording into results.json's `traffic`.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence

from ..metrics import netlink
from ..plan import Kind, Node, Plan
from .traffic import FIELDS, Recording, port_key


class PortCounters(threading.Thread):
    def __init__(self, plan: Plan, interval: float, t0: float = 0.0):
        super().__init__(name="port-counters", daemon=True)
        self.plan, self.interval, self.t0 = plan, interval, t0
        self.socks: dict[str, socket.socket] = {}
        for node in plan.nodes:
            try:
                self.socks[node.name] = netlink.open_in(node.netns)
            except OSError:
                continue  # a namespace that is gone: its ports are left out
        self.switches = [n for n in plan.nodes if n.kind is not Kind.HOST]
        self.start_counts = self.read(plan.nodes)
        self.series: dict[str, list[tuple[float, int]]] = {}
        self._halt = threading.Event()
        self._recording: Recording | None = None

    def read(self, nodes: Sequence[Node]) -> dict[str, dict[str, int]]:
        """"node:port" -> FIELDS for every port of `nodes` that could be read now."""
        out = {}
        for node in nodes:
            sock = self.socks.get(node.name)
            if sock is None:
                continue
            try:
                links = {link.name: link for link in netlink.parse_links(netlink.dump_links(sock))}
            except OSError:
                continue
            for port in node.interfaces:
                link = links.get(port.name)
                if link is not None:
                    out[port_key(node.name, port.name)] = {f: link.stats.get(f, 0) for f in FIELDS}
        return out

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        t = round(time.monotonic() - self.t0, 4)
        for key, now in self.read(self.switches).items():
            base = self.start_counts.get(key)
            if base is not None:
                self.series.setdefault(key, []).append((t, now["tx_bytes"] - base["tx_bytes"]))

    def stop(self) -> Recording:
        """The recording: every port read once more, then the sockets closed (again: the same)."""
        if self._recording is None:
            self._halt.set()
            if self.is_alive():
                self.join()
            self.sample()
            end = self.read(self.plan.nodes)
            for sock in self.socks.values():
                sock.close()
            self.socks.clear()
            self._recording = {"start": self.start_counts, "end": end, "series": self.series,
                               "sample_every_s": self.interval}
        return self._recording
