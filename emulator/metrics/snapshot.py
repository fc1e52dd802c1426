"""Scrapes reduced to what `rocelab diagnose` reads, the fabric's wiring, and the
shape of a sampled port.

`rocelab run` takes a snapshot before and after its flows and stores the difference
(and the wiring) in results.json's `evidence`, so `diagnose --results` works after the
lab is gone; live, `diagnose` does the same around its window (diagnose/evidence.py).
A snapshot is the collectors' own fetch + parse (scrape.py), reduced to KEEP.

`PortSample` is one (node, port, TC) of the BPF dataplane over a window: the sampler
(experiment/sampler.py) makes it, results.json stores a list of them as `ports`, and
diagnose's evidence reads it (`port_from_json` also takes older or hand-made ones).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from ..plan import Plan

# the metric families diagnose keeps from a scrape (everything else is left out of results.json)
KEEP = (
    "rocelab_interface_tx_packets_total", "rocelab_interface_rx_packets_total",
    "rocelab_interface_tx_bytes_total", "rocelab_interface_tx_dropped_packets_total",
    "rocelab_interface_up", "rocelab_interface_mtu_bytes",
    "rocelab_qdisc_class_dropped_packets_total",
    "rocelab_bgp_daemon_up", "rocelab_bgp_session_up", "rocelab_bgp_ecmp_min_paths",
    "rocelab_bgp_ecmp_expected_paths", "rocelab_bgp_host_prefixes_missing",
    "rocelab_engine_qp_cnps_received_total", "rocelab_engine_dcqcn_rate_reductions_total",
    "rocelab_engine_qp_retransmitted_packets_total",
    # rxe hosts (Soft-RoCE guests): their own counters, so a run's evidence covers them too
    "rocelab_rxe_up", "rocelab_rxe_sent_pkts_total", "rocelab_rxe_rcvd_pkts_total",
    "rocelab_rxe_duplicate_request_total", "rocelab_rxe_out_of_seq_request_total",
    "rocelab_rxe_completer_retry_err_total", "rocelab_rxe_retry_exceeded_err_total",
    "rocelab_rxe_send_err_total",
)
Metrics = dict[str, dict[str, float]]  # metric -> "k=v,k=v" labels (lab left out) -> value
Snapshot = dict[str, dict[str, tuple[str, float]]]  # metric -> labels -> (kind, value)
Series = list[tuple[float, int]]  # (wall seconds since the window's start, value)


class PortSeries(TypedDict):
    """A sampled port's counters every sample: depths (queued, buffered) as they were,
    the rest counted from the window's start. (JSON keeps this key order.)"""

    queued: Series
    buffered: Series
    ce_marked: Series
    pause_tx: Series
    tx_bytes: Series
    rx_ce: Series
    ecn_capable: Series


class PortSample(TypedDict):
    """One (node, port, TC) over a window: high-water marks, counters as deltas over the
    window, and their series. results.json's `ports` holds these, in this key order."""

    node: str
    port: str
    tc: int
    max_queued: int
    max_buffered: int
    tx_packets: int
    tx_bytes: int
    ce_marked: int
    ecn_capable: int
    rx_ce: int
    pause_tx: int
    pause_rx: int
    trim: int  # packets trimmed at this port's egress (switch ports, trimmable TCs)
    tx_trim: int  # ... of them sent
    dropped_trim: int  # ... of them dropped (the priority class was full)
    series: PortSeries


SERIES_KEYS = tuple(PortSeries.__annotations__)
COUNTED = ("tx_packets", "tx_bytes", "ce_marked", "ecn_capable", "rx_ce", "pause_tx", "pause_rx",
           "trim", "tx_trim", "dropped_trim")


def port_sample(node: str, port: str, tc: int, start: Mapping[str, int], end: Mapping[str, int],
                series: PortSeries) -> PortSample:
    """A port's sample from the dataplane's counters at the window's start and end."""
    d = {k: end.get(k, 0) - start.get(k, 0) for k in COUNTED}
    return PortSample(node=node, port=port, tc=tc, max_queued=end["max_queued"],
                      max_buffered=end["max_buffered"], tx_packets=d["tx_packets"],
                      tx_bytes=d["tx_bytes"], ce_marked=d["ce_marked"],
                      ecn_capable=d["ecn_capable"], rx_ce=d["rx_ce"], pause_tx=d["pause_tx"],
                      pause_rx=d["pause_rx"], trim=d["trim"], tx_trim=d["tx_trim"],
                      dropped_trim=d["dropped_trim"], series=series)


def port_from_json(raw: Mapping[str, Any]) -> PortSample:
    """A stored sample as a `PortSample`: what an older results.json (before `ecn_capable`)
    or a hand-made evidence file leaves out reads as 0, or no samples; the rest is kept."""
    series: dict[str, Any] = {k: [] for k in SERIES_KEYS} | dict(raw.get("series") or {})
    zeros = {k: 0 for k in PortSample.__annotations__ if k not in ("node", "port", "tc", "series")}
    head = {"node": raw["node"], "port": raw["port"], "tc": raw["tc"]}  # keeps the key order
    return {**head, **zeros, **raw, "series": series}  # type: ignore[typeddict-item]


def labels_key(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "lab")


def labels_of(key: str) -> tuple[tuple[str, str], ...]:
    return tuple(tuple(kv.split("=", 1)) for kv in key.split(",") if kv)  # type: ignore[misc]


def topology(plan: Plan) -> tuple[dict[str, str], dict[str, str]]:
    kinds = {n.name: n.kind.value for n in plan.nodes}
    peers = {f"{n.name}:{p.name}": f"{p.peer}:{p.peer_ifname}"
             for n in plan.nodes for p in n.interfaces if p.peer and p.peer_ifname}
    return kinds, peers


def thresholds(plan: Plan) -> dict[str, int]:
    cp = plan.congestion
    return {"kmin": cp.kmin, "kmax": cp.kmax, "xoff": cp.xoff, "xon": cp.xon,
            "pmax_ppm": int(cp.pmax * 1e6)} if cp else {}


class Snapshots:
    """Scrapes of the lab's collectors, reduced to the KEEP families (fetch + parse)."""

    def __init__(self, plan: Plan):
        from .scrape import Scraper

        self.scraper = Scraper(plan)

    def take(self) -> Snapshot:
        out: Snapshot = {}
        for fam in self.scraper.scrape().families:
            if fam.name in KEEP:
                out[fam.name] = {labels_key(dict(lb)): (fam.kind.value, v) for lb, v in fam.samples}
        return out

    def close(self) -> None:
        self.scraper.close()


def delta(start: Snapshot, end: Snapshot) -> Metrics:
    """Counters: end - start (a series born in the window counts from 0); gauges: end."""
    out: Metrics = {}
    for name, samples in end.items():
        before = start.get(name, {})
        out[name] = {k: (v - before.get(k, (kind, 0.0))[1] if kind == "counter" else v)
                     for k, (kind, v) in samples.items()}
    return out


def results_block(plan: Plan, start: Snapshot, end: Snapshot, window_s: float) -> dict[str, Any]:
    """results.json's `evidence`: what a later `diagnose --results` needs besides the rest."""
    kinds, peers = topology(plan)
    return {"window_s": round(window_s, 3), "thresholds": thresholds(plan), "kinds": kinds,
            "peers": peers, "metrics": delta(start, end)}


