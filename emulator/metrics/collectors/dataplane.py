"""The BPF dataplane of a congestion lab: per (port, TC) queue depth, ECN marks, pauses.

fetch: a copy of the stats map's bytes up to the lab's highest port id
(mmap, no system call per entry) and the controller's pfc.json. Nothing
here talks to the controller process: it keeps reacting to pauses while
we read (see congestion/controller.py).
parse: unpack every port's TC 0/2/3/6 entries (trim counters included); paused seconds per paused
egress port, the reaction-time histograms (bucket counts the controller
keeps since it started) and quantiles of its recent reactions from pfc.json.
"""

from __future__ import annotations

import json
import os
import statistics
from typing import Any

from ...congestion import libbpf
from ...congestion.maps import LEGACY_STAT, MAX_PORTS, NTC, STAT, unpack_stat
from ...histogram import Histogram
from ...paths import lab_run_dir
from ...plan import Plan
from ...plan.congestion import TCS
from ..model import Families, Family, Kind, Source

NAME = "dataplane"
C, G = Kind.COUNTER, Kind.GAUGE
FIELDS = (  # map field, metric, kind, help
    ("queued", "rocelab_dataplane_queued_bytes", G, "Bytes in the port's egress queue for this TC."),
    ("max_queued", "rocelab_dataplane_queued_max_bytes", G, "Highest egress queue depth seen."),
    ("buffered", "rocelab_dataplane_buffered_bytes", G,
     "Bytes held in the switch that arrived through this port (PFC accounting)."),
    ("max_buffered", "rocelab_dataplane_buffered_max_bytes", G, "Highest buffered bytes seen."),
    ("tx_packets", "rocelab_dataplane_tx_packets_total", C, "Packets sent out of the port."),
    ("tx_bytes", "rocelab_dataplane_tx_bytes_total", C, "Bytes sent out of the port."),
    ("ecn_capable", "rocelab_dataplane_ecn_capable_packets_total", C, "ECN-capable packets sent."),
    ("ce_marked", "rocelab_dataplane_ce_marked_packets_total", C,
     "Packets this port marked CE (switch ports only)."),
    ("rx_ce", "rocelab_dataplane_rx_ce_packets_total", C, "CE-marked packets arriving at the port."),
    ("pause_tx", "rocelab_dataplane_pause_tx_frames_total", C, "802.1Qbb PFC frames sent."),
    ("pause_rx", "rocelab_dataplane_pause_rx_frames_total", C, "802.1Qbb PFC frames received."),
    ("paused", "rocelab_dataplane_xoff", G,
     "1 while an XOFF is outstanding for traffic arriving through this port."),
    ("trim", "rocelab_port_trim_packets_total", C,
     "Packets of this class the port trimmed instead of queueing whole (SONiC TRIM_PACKETS)."),
    ("tx_trim", "rocelab_port_tx_trim_packets_total", C,
     "Trimmed packets of this class the port transmitted (SONiC TX_TRIM_PACKETS)."),
    ("dropped_trim", "rocelab_port_dropped_trim_packets_total", C,
     "Trimmed packets of this class dropped: the priority class was full (SONiC "
     "DROPPED_TRIM_PACKETS)."),
)


class Collector(Source):
    name = NAME

    def __init__(self, plan: Plan):
        super().__init__(plan)
        self._map: tuple[int, int, Any] | None = None  # (map id, fd, mmap)
        self.size = (max(p.port_id for n in plan.nodes for p in n.interfaces) + 1) * NTC * STAT.size

    def applies(self) -> bool:
        return self.plan.congestion is not None

    def fetch(self) -> dict[str, Any]:
        run_dir = lab_run_dir(self.plan.lab)
        ident = json.loads((run_dir / "bpf.json").read_text())["maps"]["stats"]
        if self._map is None or self._map[0] != ident:  # a new lab under the same name
            self.close()
            fd = libbpf.map_fd_by_id(ident)
            page = os.sysconf("SC_PAGE_SIZE")
            mm = libbpf.mmap_array(fd, (STAT.size * MAX_PORTS * NTC + page - 1) // page * page)
            self._map = (ident, fd, mm)
        try:
            pfc = (run_dir / "pfc.json").read_text()
        except FileNotFoundError:
            pfc = ""
        return {"stats": bytes(self._map[2][:self.size]), "entry": STAT.size, "pfc": pfc}

    def close(self) -> None:
        if self._map:
            self._map[2].close()
            os.close(self._map[1])
            self._map = None

    @staticmethod
    def parse(raw: dict[str, Any], plan: Plan) -> list[Family]:
        fams = Families(plan.lab)
        stats = raw["stats"]
        layout = STAT if raw.get("entry") == STAT.size else LEGACY_STAT  # a capture from before trimming
        for node in plan.nodes:
            for port in node.interfaces:
                for tc in TCS:
                    index = port.port_id * NTC + tc
                    if (index + 1) * layout.size > len(stats):
                        continue
                    values = unpack_stat(stats, index, layout)
                    labels = fams.labels(node=node.name, port=port.name, tc=str(tc))
                    for field, metric, kind, help_ in FIELDS:
                        value = max(0, values[field]) if kind is G else values[field]
                        fams.add(kind, metric, help_, value, labels)
        _pfc(fams, raw.get("pfc") or "")
        return fams.as_list()


def _pfc(fams: Families, text: str) -> None:
    if not text:
        return
    pfc = json.loads(text)
    fams.add(C, "rocelab_pfc_pauses_total", "XOFF events the PFC controller acted on.",
             pfc.get("pauses", 0))
    fams.add(G, "rocelab_pfc_active_pauses", "Egress classes paused right now.",
             pfc.get("active_pauses", 0))
    for key, seconds in sorted(pfc.get("paused_s", {}).items()):
        node, port, tc = key.rsplit(":", 2)
        fams.add(C, "rocelab_pfc_paused_seconds_total",
                 "Wall seconds this egress port's class spent paused by PFC.", seconds,
                 fams.labels(node=node, port=port, tc=tc))
    for event, hist in sorted(pfc.get("reaction_hist", {}).items()):
        fams.add_histogram("rocelab_pfc_reaction_seconds",
                           "PFC reaction time: a BPF XOFF (XON) event to the upstream class paused "
                           "(resumed), every reaction since the controller started.",
                           Histogram.from_json(hist), fams.labels(event=event))
    reactions = pfc.get("reaction_us") or []
    if len(reactions) >= 2:
        q = statistics.quantiles(reactions, n=100, method="inclusive")
        for name, value in (("p50", q[49]), ("p99", q[98])):
            fams.add(G, f"rocelab_pfc_reaction_{name}_seconds",
                     f"PFC reaction time (XOFF seen to upstream paused), {name} of the "
                     "controller's recent pauses.", value / 1e6)
