"""Interface counters per node and port (bytes, packets, drops, errors, oper state).

fetch: one RTM_GETLINK dump per node namespace (raw bytes).
parse: the lab's ports only (not lo), from IFLA_STATS64; their oper state and MTU.
"""

from __future__ import annotations

from ...plan import Plan
from .. import netlink
from ..model import Families, Family, Kind, Source

NAME = "interface"
COUNTERS = (  # stats64 field, metric, help
    ("rx_bytes", "rocelab_interface_rx_bytes_total", "Bytes received on a port."),
    ("tx_bytes", "rocelab_interface_tx_bytes_total", "Bytes sent on a port."),
    ("rx_packets", "rocelab_interface_rx_packets_total", "Packets received on a port."),
    ("tx_packets", "rocelab_interface_tx_packets_total", "Packets sent on a port."),
    ("rx_dropped", "rocelab_interface_rx_dropped_packets_total", "Packets dropped on receive."),
    ("tx_dropped", "rocelab_interface_tx_dropped_packets_total", "Packets dropped on send."),
    ("rx_errors", "rocelab_interface_rx_errors_total", "Receive errors."),
    ("tx_errors", "rocelab_interface_tx_errors_total", "Send errors."),
)


class Collector(Source):
    name = NAME

    def fetch(self) -> dict[str, bytes]:
        out = {}
        for node in self.plan.nodes:
            with netlink.open_in(node.netns) as sock:
                out[node.name] = netlink.dump_links(sock)
        return out

    @staticmethod
    def parse(raw: dict[str, bytes], plan: Plan) -> list[Family]:
        fams = Families(plan.lab)
        for node in plan.nodes:
            links = {link.name: link for link in netlink.parse_links(raw.get(node.name, b""))}
            for port in node.interfaces:
                link = links.get(port.name)
                if link is None:
                    continue
                labels = fams.labels(node=node.name, port=port.name)
                for field, metric, help_ in COUNTERS:
                    fams.add(Kind.COUNTER, metric, help_, link.stats.get(field, 0), labels)
                fams.add(Kind.GAUGE, "rocelab_interface_up",
                         "1 if the port is operationally up (carrier), else 0.", int(link.oper_up),
                         labels)
                fams.add(Kind.GAUGE, "rocelab_interface_mtu_bytes",
                         "The port's MTU (IP bytes); both ends of a link must agree.", link.mtu,
                         labels)
        return fams.as_list()
