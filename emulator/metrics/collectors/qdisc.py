"""Queueing disciplines per port, and their HTB classes per traffic class.

fetch: per node namespace, the qdisc dump, one class dump per lab port (the
kernel dumps classes per device only) and the ifindex -> name map (from a
link dump, repeated only when the set of devices changes).
parse: the root qdisc of each port (on plain labs a veth's `noqueue`, which
counts nothing) and, on congestion labs, the HTB leaf classes 1:10/1:13/1:16
as TC 0/3/6: sent, backlog, drops, overlimits, requeues.
"""

from __future__ import annotations

from typing import Any

from ...congestion.qos import classid
from ...plan import Plan
from ...plan.congestion import TCS
from .. import netlink
from ..model import Families, Family, Kind, Source

NAME = "qdisc"
TC_ROOT = 0xFFFFFFFF
# (stat, suffix, kind, help)
STATS = (
    ("bytes", "sent_bytes_total", Kind.COUNTER, "Bytes sent"),
    ("packets", "sent_packets_total", Kind.COUNTER, "Packets sent"),
    ("backlog", "backlog_bytes", Kind.GAUGE, "Bytes queued now"),
    ("qlen", "backlog_packets", Kind.GAUGE, "Packets queued now"),
    ("drops", "dropped_packets_total", Kind.COUNTER, "Packets dropped"),
    ("overlimits", "overlimits_total", Kind.COUNTER, "Times the shaper had no tokens (overlimits)"),
    ("requeues", "requeues_total", Kind.COUNTER, "Packets requeued"),
)
CLASS_TC = {classid(tc): tc for tc in TCS}


class Collector(Source):
    name = NAME

    def __init__(self, plan: Plan):
        super().__init__(plan)
        self._ifnames: dict[str, dict[int, str]] = {}  # node -> ifindex -> name

    def fetch(self) -> dict[str, dict]:
        out = {}
        for node in self.plan.nodes:
            with netlink.open_in(node.netns) as sock:
                qdiscs = netlink.dump_qdiscs(sock)
                names = self._names(sock, node.name, qdiscs)
                index = {name: i for i, name in names.items()}
                classes = b"".join(netlink.dump_classes(sock, index[p.name])
                                   for p in node.interfaces if p.name in index)
            out[node.name] = {"ifnames": {str(i): n for i, n in names.items()},
                              "qdiscs": qdiscs, "classes": classes}
        return out

    def _names(self, sock, node: str, qdiscs: bytes) -> dict[int, str]:
        """ifindex -> name, dumped again only when the devices changed (every device has a qdisc)."""
        names = self._ifnames.get(node)
        if names is None or set(names) != netlink.tc_indexes(qdiscs):
            names = {link.index: link.name for link in netlink.parse_links(netlink.dump_links(sock))}
            self._ifnames[node] = names
        return names

    @staticmethod
    def parse(raw: dict[str, dict[str, Any]], plan: Plan) -> list[Family]:
        fams = Families(plan.lab)
        for node in plan.nodes:
            dumps = raw.get(node.name)
            if not dumps:
                continue
            names = {int(i): n for i, n in dumps["ifnames"].items()}
            ports = {p.name for p in node.interfaces}
            for q in netlink.parse_tc(dumps["qdiscs"], lambda _h, parent: parent == TC_ROOT):
                if names.get(q.index) in ports:
                    _emit(fams, "rocelab_qdisc_", "root qdisc of the port", q.stats,
                          node=node.name, port=names[q.index])
            for c in netlink.parse_tc(dumps["classes"], lambda handle, _p: handle in CLASS_TC):
                if names.get(c.index) in ports:
                    _emit(fams, "rocelab_qdisc_class_", "HTB class of the traffic class", c.stats,
                          node=node.name, port=names[c.index], tc=str(CLASS_TC[c.handle]))
        return fams.as_list()


def _emit(fams: Families, prefix: str, what: str, stats: dict[str, int], **labels: str) -> None:
    shared = fams.labels(**labels)
    for stat, suffix, kind, help_ in STATS:
        fams.add(kind, prefix + suffix, f"{help_}, {what}.", stats[stat], shared)
