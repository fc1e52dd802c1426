"""What `diagnose` reads: the counters of a window, from a live lab or a run's results.json.

Two sources, one shape (`Evidence`), so every rule is a pure function of it and is
unit-tested on recorded evidence:

- live (`collect`): one scrape of the lab's collectors (the exporter's own fetch/parse:
  interfaces, qdisc classes, BGP, engines) at the start and the end of the window, and
  the BPF per (port, TC) counters sampled every 100 ms in between (queue depth, marks,
  pauses over time: who paused first);
- a run (`from_results`): results.json's sampled `ports`, `flows` (per QP: UDP source
  port, spine, retransmissions, CNPs, DCQCN end state), `pfc` and the `evidence` block
  the runner adds (the same two scrapes around the run, and the fabric's wiring).

MRC connections (`mrc`): a run's are its flows' `mrc` blocks; live (or from a run whose
flows carry none) they are rebuilt from the engines' `rocelab_mrc_*` series (mrcconns.py).

Counters are deltas over the window; gauges are their value at its end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import SpecError
from ..metrics.snapshot import (
    Metrics,
    PortSample,
    Snapshots,
    delta,
    labels_of,
    port_from_json,
    thresholds,
    topology,
)
from ..plan import Plan
from . import mrcconns

SAMPLE_EVERY_S = 0.1


@dataclass
class Evidence:
    """Everything the rules read; JSON-able (`as_json`), so tests record it."""

    lab: str
    source: str  # "live" or the results.json it came from
    window_s: float  # wall seconds the counters span
    dilation: float
    rate_bps: int | None  # the shaped line rate; None: an unshaped lab (no congestion plane)
    thresholds: dict[str, int]  # kmin, kmax, xoff, xon (bytes), pmax_ppm; {} unshaped
    kinds: dict[str, str]  # node -> spine, leaf, host, superspine
    peers: dict[str, str]  # "node:port" -> "peer:peer_port"
    ports: list[PortSample]  # per (node, port, TC): results.json's `ports`
    paused_s: dict[str, float]  # "node:port:tc" -> wall seconds that egress class was paused
    metrics: Metrics  # KEEP families: counters as deltas, gauges at the end
    flows: list[dict[str, Any]] = field(default_factory=list)  # results.json's `flows` shape
    roce_mtu: int = 4096  # the RoCE path MTU the transfers use (payload bytes)
    mrc: list[dict[str, Any]] = field(default_factory=list)  # live MRC connections (mrcconns.py)

    def __post_init__(self) -> None:
        # one shape whatever wrote them: a port an older results.json or a hand-made
        # evidence file leaves a counter out of reads as 0 (metrics.snapshot.port_from_json)
        self.ports = [port_from_json(p) for p in self.ports]

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Evidence:
        return cls(**raw)

    # -- lookups the rules share ---------------------------------------------

    def metric(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """name -> {(("node", "leaf1"), ("port", "spine1")): value}."""
        return {labels_of(k): v for k, v in self.metrics.get(name, {}).items()}

    def by_port(self, name: str) -> dict[str, float]:
        """A per-port metric as {"node:port": value}."""
        out = {}
        for labels, v in self.metric(name).items():
            d = dict(labels)
            if "port" in d:
                out[f"{d['node']}:{d['port']}"] = v
        return out

    def by_node(self, name: str) -> dict[str, float]:
        return {dict(labels)["node"]: v for labels, v in self.metric(name).items()
                if "node" in dict(labels)}

    def kind(self, node: str) -> str:
        return self.kinds.get(node, "")

    def peer(self, node: str, port: str) -> tuple[str, str] | None:
        got = self.peers.get(f"{node}:{port}")
        if got is None:
            return None
        a, b = got.split(":", 1)
        return a, b

    def port_towards(self, node: str, peer: str) -> str | None:
        """The (first) port of `node` whose peer is `peer`."""
        for key, other in sorted(self.peers.items()):
            n, p = key.split(":", 1)
            if n == node and other.split(":", 1)[0] == peer:
                return p
        return None

    def leaf_of(self, host: str) -> str | None:
        for key, other in self.peers.items():
            if key.startswith(f"{host}:"):
                return other.split(":", 1)[0]
        return None



def from_results(results: dict[str, Any], source: str) -> Evidence:
    """The evidence of a `rocelab run` (results.json, written since diagnose exists)."""
    ev = results.get("evidence")
    if not isinstance(ev, dict):
        raise SpecError(source, "evidence", "missing: written by a rocelab before `diagnose` "
                        "existed, or a compare run; run the experiment again")
    flows = results.get("flows", [])
    ends = [f["end_s"] or 0.0 for f in flows if f.get("end_s")]
    recorded = any(f.get("mrc") for f in flows)  # else the MRC series, without spines
    return Evidence(
        lab=results.get("lab", "?"), source=source,
        window_s=float(ev.get("window_s") or (max(ends) if ends else 0.0)),
        dilation=float(results.get("dilation") or 1.0), rate_bps=results.get("link_rate_bps"),
        thresholds=ev.get("thresholds", {}), kinds=ev["kinds"], peers=ev["peers"],
        ports=results.get("ports", []),
        paused_s=dict(results.get("pfc", {}).get("paused_s", {})),
        metrics=ev.get("metrics", {}), flows=flows, roce_mtu=int(ev.get("roce_mtu", 4096)),
        mrc=[] if recorded else mrcconns.from_metrics(ev.get("metrics", {})))


def collect(plan: Plan, window_s: float) -> Evidence:
    """Sample a running lab for `window_s` seconds (live diagnose)."""
    from ..experiment.analysis import paused_between
    from ..experiment.sampler import Sampler, pfc_snapshot

    snaps = Snapshots(plan)
    try:
        t0 = time.monotonic()
        sampler = Sampler(plan, SAMPLE_EVERY_S, t0) if plan.congestion else None
        pfc0 = pfc_snapshot(plan) if plan.congestion else {}
        start = snaps.take()
        if sampler:
            sampler.start()
        time.sleep(window_s)
        ports = sampler.stop() if sampler else []
        pfc1 = pfc_snapshot(plan) if plan.congestion else {}
        end = snaps.take()
    finally:
        snaps.close()
    kinds, peers = topology(plan)
    cp = plan.congestion
    metrics = delta(start, end)
    mrc = mrcconns.from_metrics(metrics)
    mrcconns.resolve_spines(plan, mrc)
    return Evidence(lab=plan.lab, source="live", window_s=round(time.monotonic() - t0, 3),
                    dilation=plan.dilation, rate_bps=cp.rate_of(plan.speed_bps) if cp else None,
                    thresholds=thresholds(plan), kinds=kinds, peers=peers, ports=ports,
                    paused_s=paused_between(pfc0, pfc1), metrics=metrics, flows=[], mrc=mrc)

