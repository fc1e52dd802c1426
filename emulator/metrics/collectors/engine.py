"""The RoCEv2 engines: per QP counters and DCQCN state, per host transport counters.

fetch: the `stats` reply of every host engine that is running (engines
start on a host's first transfer), over its unix socket, with a timeout.
parse: per QP (label `qp`, hex QPN; `flow`, `src`, `dst` of the flow it
serves) every QpCounters field and the DCQCN rate, target and alpha; per
host the transport counters, the summed counters of QPs already finished
(so host totals only grow), the progress of transfers in flight and the
histograms of finished transfers; per flow (labels `flow`, `src`, `dst`) its
QPs' counters summed over every handoff, so a flow's series outlive its QPs;
per MRC connection and path its EV states and recovery counters (engine_mrc.py).
"""

from __future__ import annotations

import json
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ...engine.jsonlines import MAX_REPLY_LINE
from ...histogram import Histogram
from ...paths import node_run_dir
from ...plan import Plan
from ..model import Families, Family, Kind, Labels, Source
from . import engine_mrc

NAME = "engine"
TIMEOUT_S = 1.0
C, G = Kind.COUNTER, Kind.GAUGE
QP_COUNTERS = {  # QpCounters field -> (metric name, help); others become rocelab_qp_<field>_total
    "bytes_sent": ("sent_bytes", "Payload bytes sent (retransmissions included)."),
    "packets_sent": ("sent_packets", "Packets sent (retransmissions included)."),
    "rx_bytes": ("received_bytes", "Payload bytes placed or delivered in order."),
    "rx_packets": ("received_packets", "Packets accepted in order."),
    "retransmitted_packets": ("retransmitted_packets", "Packets sent again (go-back-N, timeouts)."),
    "naks_tx": ("naks_sent", "NAKs sent."),
    "naks_rx": ("naks_received", "NAKs received."),
    "acks_tx": ("acks_sent", "ACKs sent."),
    "acks_rx": ("acks_received", "ACKs received."),
    "cnps_tx": ("cnps_sent", "CNPs sent (answers to CE marks, at most one per interval)."),
    "cnps_rx": ("cnps_received", "CNPs received (DCQCN rate cuts follow)."),
    "ce_rx": ("ce_received_packets", "CE-marked packets that reached the QP (notification point)."),
    "timeouts": ("timeouts", "Retransmission timer expiries."),
    "duplicates": ("duplicate_packets", "Requests behind the expected PSN."),
    "out_of_sequence": ("out_of_sequence_packets", "Requests ahead of the expected PSN."),
    "bad_icrc": ("bad_icrc_packets", "Packets dropped for a bad ICRC."),
    "implied_naks": ("implied_naks", "Gaps the requester found in READ responses or ACKs."),
    "access_errors": ("access_errors", "Requests refused: bad rkey or outside a region."),
    "invalid_requests": ("invalid_requests", "Requests refused as malformed."),
    "unexpected_acks": ("unexpected_acks", "ACKs, NAKs or responses for nothing outstanding."),
    "rnr_naks_tx": ("rnr_naks_sent", "RNR NAKs sent (a SEND found no posted receive)."),
    "rnr_naks_rx": ("rnr_naks_received", "RNR NAKs received (the QP waited its RNR timer)."),
    "stale_read_requests": ("stale_read_requests",
                            "Retried READs older than the IRD ring: dropped, as rxe does."),
}
DCQCN = {  # dcqcn_state field -> (metric, kind, help)
    "rate_bps": ("rocelab_qp_dcqcn_rate_bits_per_second", G, "DCQCN current rate (Rc)."),
    "target_bps": ("rocelab_qp_dcqcn_target_rate_bits_per_second", G, "DCQCN target rate (Rt)."),
    "alpha": ("rocelab_qp_dcqcn_alpha_ratio", G, "DCQCN alpha (congestion estimate, 0-1)."),
    "reductions": ("rocelab_qp_dcqcn_rate_reductions_total", C, "DCQCN rate cuts."),
}
HISTOGRAMS = {  # stats "histograms" key -> (metric, help)
    "transfer_duration_seconds": (
        "rocelab_transfer_duration_seconds",
        "Data phase of each transfer this engine initiated and finished (wall; FCT)."),
    "kv_handoff_seconds": (
        "rocelab_kv_handoff_seconds",
        "QP setup + data phase of each transfer this engine initiated and finished (wall)."),
}
TRANSPORT = {  # TransportCounters field -> (metric, help)
    "rx_datagrams": ("rocelab_engine_rx_datagrams_total", "Datagrams received."),
    "rx_bytes": ("rocelab_engine_rx_bytes_total", "Bytes received (IP datagrams)."),
    "tx_datagrams": ("rocelab_engine_tx_datagrams_total", "Datagrams sent."),
    "tx_bytes": ("rocelab_engine_tx_bytes_total", "Bytes sent (IP datagrams)."),
    "tx_errors": ("rocelab_engine_tx_errors_total",
                  "Sends the socket or qdisc refused (paused or full port): held and retried."),
    "bad_icrc": ("rocelab_engine_bad_icrc_datagrams_total", "Datagrams with a bad ICRC."),
    "malformed": ("rocelab_engine_malformed_datagrams_total", "Datagrams that were not RoCEv2."),
}


class Collector(Source):
    name = NAME

    def __init__(self, plan: Plan):
        super().__init__(plan)
        self._pool = ThreadPoolExecutor(max(1, min(8, len(plan.hosts))), "engine-stats")

    def applies(self) -> bool:
        return bool(self.plan.hosts)

    def fetch(self) -> dict[str, Any]:
        hosts = [h for h in self.plan.hosts
                 if (node_run_dir(self.plan.lab, h.name) / "engine.sock").exists()]
        return {h.name: r for h, r in zip(hosts, self._pool.map(self._ask, hosts))}

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def _ask(self, host) -> dict[str, Any]:
        path = node_run_dir(self.plan.lab, host.name) / "engine.sock"
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(TIMEOUT_S)
                s.connect(str(path))
                s.sendall(b'{"cmd":"stats"}\n')
                with s.makefile("rb") as f:
                    line = f.readline(MAX_REPLY_LINE + 1)  # bounded, as the CLI reads it
                    if len(line) > MAX_REPLY_LINE:
                        return {"event": "error", "error": f"reply over {MAX_REPLY_LINE} bytes"}
                    return json.loads(line or b'{"event":"error","error":"closed"}')
        except (OSError, json.JSONDecodeError) as e:
            return {"event": "error", "error": str(e)}

    @staticmethod
    def parse(raw: dict[str, Any], plan: Plan) -> list[Family]:
        fams = Families(plan.lab)
        for host, reply in sorted(raw.items()):
            ok = reply.get("event") == "stats"
            labels = fams.labels(node=host)
            fams.add(G, "rocelab_engine_up", "1 if the host's engine answered.", int(ok), labels)
            if not ok:
                continue
            _host(fams, labels, reply)
            flows = reply.get("qp_flows", {})
            for qpn, counters in sorted(reply.get("qps", {}).items(), key=lambda kv: int(kv[0])):
                flow = dict(zip(("flow", "src", "dst"), flows.get(qpn, ())))
                _qp(fams, fams.labels(node=host, qp=f"{int(qpn):#x}", **flow), counters)
            _transfers(fams, plan, host, reply.get("transfers", []), flows)
            if "mrc" in reply:
                engine_mrc.parse(fams, host, reply["mrc"])
            for f in reply.get("flows", []):
                _flow(fams, fams.labels(node=host, flow=f["flow"], src=f["src"], dst=f["dst"]), f)
            for key, (metric, help_) in HISTOGRAMS.items():
                if key in reply.get("histograms", {}):
                    fams.add_histogram(metric, help_, Histogram.from_json(reply["histograms"][key]),
                                       labels)
        return fams.as_list()


def _host(fams: Families, labels: Labels, reply: dict[str, Any]) -> None:
    for field, (metric, help_) in TRANSPORT.items():
        fams.add(C, metric, help_, reply.get("transport", {}).get(field, 0), labels)
    fams.add(C, "rocelab_engine_transfers_total", "Transfers this engine initiated and finished.",
             reply.get("transfers_done", 0), labels)
    fams.add(G, "rocelab_engine_qps", "Queue pairs being served.", len(reply.get("qps", {})), labels)
    if "retired" not in reply:  # an engine from before telemetry: no host totals
        return
    live = list(reply.get("qps", {}).values())
    for field, (name, help_) in QP_COUNTERS.items():
        total = reply["retired"].get(field, 0) + sum(c.get(field, 0) for c in live)
        fams.add(C, f"rocelab_engine_qp_{name}_total", f"All QPs of the host: {help_}", total, labels)
    if "dcqcn_reductions" in reply:
        fams.add(C, "rocelab_engine_dcqcn_rate_reductions_total",
                 "DCQCN rate cuts over all QPs of the host, finished ones included.",
                 reply["dcqcn_reductions"], labels)


def _flow(fams: Families, labels: Labels, flow: dict[str, Any]) -> None:
    """One flow as this engine saw it: its QPs' counters summed over every handoff."""
    counters = flow["counters"]
    fams.add(C, "rocelab_flow_transfers_total",
             "Transfers of the flow this engine initiated and finished.", flow["transfers"], labels)
    for field, (name, help_) in QP_COUNTERS.items():
        fams.add(C, f"rocelab_flow_{name}_total", f"All QPs of the flow on this host: {help_}",
                 counters.get(field, 0), labels)
    fams.add(C, "rocelab_flow_dcqcn_rate_reductions_total",
             "DCQCN rate cuts over all QPs of the flow on this host.",
             counters.get("dcqcn_reductions", 0), labels)


def _qp(fams: Families, labels: Labels, counters: dict[str, Any]) -> None:
    for field, value in counters.items():
        if field == "dcqcn" or not isinstance(value, (int, float)):
            continue
        name, help_ = QP_COUNTERS.get(field, (field, f"QP counter {field}."))
        fams.add(C, f"rocelab_qp_{name}_total", help_, value, labels)
    for field, (metric, kind, help_) in DCQCN.items():
        if field in (counters.get("dcqcn") or {}):
            fams.add(kind, metric, help_, counters["dcqcn"][field], labels)


def _transfers(fams: Families, plan: Plan, host: str, transfers: list[dict[str, Any]],
               flows: dict[str, list[str]]) -> None:
    """Transfers in flight that this host initiated (label qp: its first QP)."""
    by_ip = {h.address: h.name for h in plan.hosts}
    fams.add(G, "rocelab_engine_transfers_active", "Transfers this engine initiated, in flight.",
             len(transfers), fams.labels(node=host))
    for t in transfers:
        peer = by_ip.get(t.get("peer_ip"), t.get("peer_ip") or "?")
        flow = flows.get(str(t["qpns"][0]))
        labels = fams.labels(node=host, qp=f"{t['qpns'][0]:#x}", peer=peer,
                             **({"flow": flow[0]} if flow else {}))
        fams.add(G, "rocelab_engine_transfer_done_bytes",
                 "Bytes of a transfer in flight whose messages completed.", t["bytes_done"], labels)
        fams.add(G, "rocelab_engine_transfer_size_bytes", "Size of a transfer in flight.",
                 t["bytes_total"], labels)
