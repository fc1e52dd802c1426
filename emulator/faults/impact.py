"""What a fault does to transfers in flight, and how fast the fabric heals.

`fault_impact` runs a scenario: (optionally) the transfers alone as a
baseline; then the same transfers again, concurrently, with the fault
injected once every one of them is moving data; it waits for routing to
converge around the fault, for the transfers to end (completed, or failed
once a QP exceeded its retry limit: a flow never hangs the run), heals, and
waits for the FIB to be whole again. It reports per event the control-plane
convergence (recovery.py), and per flow the data-plane interruption (the
engine's longest gap in in-order delivery on the receiving QPs),
retransmissions, timeouts, integrity and the slowdown against the baseline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from .. import forwarding
from ..engine import client
from ..engine.job import Job, TransferResult
from ..errors import ConvergeTimeout, RocelabError
from ..plan import Kind, Node, Plan
from . import inject
from .model import Convergence
from .recovery import Event, FibWatcher, convergence, settle

JOIN_SLACK_S = 30.0  # beyond the job's own timeout, before a flow is declared stuck
FLOW_KEYS = ("bytes", "duration_s", "goodput_gbps", "interruption_s", "retransmitted_packets",
             "timeouts", "naks_rx", "integrity_ok")
Log = Callable[[str], None]
Row = TransferResult | dict[str, Any]  # a transfer's result, or {src, dst, error} when it failed


def _quiet(_: str) -> None:
    pass


class Flows:
    """Transfers running concurrently in threads, one per (src, dst) pair."""

    def __init__(self, plan: Plan, pairs: list[tuple[Node, Node]], job: Job):
        self.plan, self.pairs, self.job = plan, pairs, job
        self.done = [0] * len(pairs)
        self.results: list[Row | None] = [None] * len(pairs)
        self._moved = threading.Condition()
        self._threads = [threading.Thread(target=self._one, args=(i,), daemon=True)
                         for i in range(len(pairs))]
        self._tx0: dict[str, dict[str, int]] = {}

    def start(self) -> Flows:
        client.ensure_engines(self.plan, sorted({h for p in self.pairs for h in p},
                                                key=lambda n: n.name))
        self._tx0 = self._uplink_tx()
        for t in self._threads:
            t.start()
        return self

    def _one(self, i: int) -> None:
        src, dst = self.pairs[i]

        def tick(done: int, *_: int) -> None:
            with self._moved:
                self.done[i] = done
                self._moved.notify_all()

        res: Row
        try:
            res = client.transfer(self.plan, src, dst, self.job, tick)
        except RocelabError as e:  # a QP over its retry limit, an unreachable peer...
            res = {"src": src.name, "dst": dst.name, "error": str(e)}
        with self._moved:
            self.results[i] = res
            self._moved.notify_all()

    def wait_moving(self, fraction: float, timeout_s: float) -> bool:
        """Until every flow moved `fraction` of its bytes (or one ended). True if all in flight."""
        want = fraction * self.job.payload_bytes
        deadline = time.monotonic() + timeout_s
        with self._moved:
            while min(self.done) < want and all(r is None for r in self.results):
                if not self._moved.wait(max(0.0, deadline - time.monotonic())):
                    raise RocelabError(f"transfers did not start moving within {timeout_s:.0f} s")
            return all(r is None for r in self.results)

    def join(self) -> list[Row]:
        deadline = time.monotonic() + self.job.timeout_s + JOIN_SLACK_S
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return [r if r is not None else {"src": s.name, "dst": d.name, "error": "stuck",
                                         "stuck": True}
                for r, (s, d) in zip(self.results, self.pairs)]

    def _uplink_tx(self) -> dict[str, dict[str, int]]:
        return {leaf.name: {p: c["tx_bytes"] for p, c in forwarding.port_counters(leaf).items()}
                for leaf in self.plan.of_kind(Kind.LEAF)}

    def uplink_bytes(self) -> dict[str, dict[str, int]]:
        """leaf -> spine -> bytes the leaf sent to it since the flows started."""
        now = self._uplink_tx()
        return {leaf: {s.name: now[leaf][s.name] - self._tx0[leaf][s.name]
                       for s in self.plan.of_kind(Kind.SPINE)} for leaf in now}

    def busiest_uplink(self, leaf: str) -> str:
        """The spine `leaf` sent the most bytes to since the flows started."""
        sent = self.uplink_bytes()[leaf]
        return max(sent, key=lambda s: sent[s])

    def busiest_spine(self) -> str:
        sent = self.uplink_bytes()
        spines = [s.name for s in self.plan.of_kind(Kind.SPINE)]
        return max(spines, key=lambda s: sum(by_spine[s] for by_spine in sent.values()))


Action = dict[str, Any] | Callable[[Flows], dict[str, Any]]


def heal_action(action: dict[str, Any]) -> dict[str, Any]:
    """The heal that undoes a fail action."""
    return {"heal": action["fail"], **{k: v for k, v in action.items() if k in ("a", "b", "node")}}


def fault_impact(plan: Plan, action: Action, pairs: list[tuple[Node, Node]], job: Job, *,
                 baseline: bool = True, start_fraction: float = 0.15,
                 settle_timeout_s: float = 30.0, log: Log = _quiet) -> dict[str, Any]:
    """One fault during concurrent transfers, healed afterwards; see the module docstring."""
    base = Flows(plan, pairs, job).start().join() if baseline else None
    if base:
        log("baseline: " + ", ".join(f"{r.get('duration_s', '?')} s" for r in base))
    with FibWatcher(plan) as watch:
        flows = Flows(plan, pairs, job).start()
        in_flight = flows.wait_moving(start_fraction, settle_timeout_s)
        chosen = action(flows) if callable(action) else action
        fail = inject.apply(plan, chosen)
        log(f"{fail.get('name')} at {fail['iso']}")
        settled = _settled(plan, watch, fail, settle_timeout_s, log)
        results = flows.join()
        heal = inject.apply(plan, heal_action(chosen))
        healed = _settled(plan, watch, heal, settle_timeout_s, log)
    conv = [convergence(watch.samples, fail, plan, heal["monotonic"]),
            convergence(watch.samples, heal, plan)]
    for c, ok in zip(conv, (settled, healed)):
        c["settled"] = c["settled"] and ok
    bases: list[Row | None] = list(base) if base else [None] * len(results)
    flows_out = [_flow_row(r, b) for r, b in zip(results, bases)]
    return {"action": chosen, "in_flight": in_flight, "job": job.to_json(),
            "events": [fail, heal], "convergence": conv, "flows": flows_out,
            "summary": _summary(conv, flows_out)}


def _settled(plan: Plan, watch: FibWatcher, event: Event, timeout_s: float,
             log: Log) -> bool:
    try:
        settle(plan, watch, event, timeout_s, log)
        return True
    except ConvergeTimeout:  # reported as settled: false, the run goes on
        return False


def _failed(res: Row) -> bool:
    """A transfer that gave up: an {src, dst, error} row, or a result that says so (a
    result carries `failed` and `error: None` since MRC reports, not raises)."""
    return bool(res.get("failed")) or res.get("error") is not None


def _flow_row(res: Row, base: Row | None) -> dict[str, Any]:
    row = {"src": res["src"], "dst": res["dst"], **{k: res.get(k) for k in FLOW_KEYS},
           "failed": _failed(res), "error": res.get("error"),
           "qps": [{k: q.get(k) for k in ("udp_sport", "spine", "retransmitted_packets", "timeouts")}
                   for q in res.get("qps", [])]}
    if base and not _failed(base) and not _failed(res):
        row["baseline_duration_s"] = base["duration_s"]
        row["slowdown"] = round(res["duration_s"] / max(base["duration_s"], 1e-9), 3)
    return row


def _summary(conv: list[Convergence], flows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [f for f in flows if not f["failed"]]
    slow = [f["slowdown"] for f in ok if "slowdown" in f]
    return {
        "detect_s": conv[0]["detect_s"], "converge_s": conv[0]["converge_s"],
        "heal_converge_s": conv[1]["converge_s"],
        "interruption_max_s": max((f["interruption_s"] for f in ok), default=None),
        "interruption_per_flow_s": [f["interruption_s"] for f in flows],
        "slowdown_max": max(slow, default=None),
        "retransmitted_packets": sum(f["retransmitted_packets"] or 0 for f in ok),
        "timeouts": sum(f["timeouts"] or 0 for f in ok),
        "flows": len(flows), "flows_failed": len(flows) - len(ok),
        "integrity_ok": bool(ok) and all(f["integrity_ok"] for f in ok),
    }


REPORT_COLUMNS = ("scenario", "detect_s", "converge_s", "heal_converge_s", "interruption_max_s",
                  "slowdown_max", "retransmitted_packets", "flows_failed")


def report_table(results: dict[str, dict[str, Any]]) -> str:
    """A markdown table of scenario summaries, for the run report."""
    lines = ["| " + " | ".join(REPORT_COLUMNS) + " |", "|" + "---|" * len(REPORT_COLUMNS)]
    for name, res in results.items():
        s = res.get("summary", res)
        cells = [name] + ["-" if s.get(c) is None else str(s.get(c)) for c in REPORT_COLUMNS[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
