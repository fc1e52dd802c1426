"""An experiment's flow resolves each transfer's spines (an `ip route get` per QP, one
`ip -batch` per MRC connection) beside its next transfer instead of between the two:
10-60 ms of every collisions handoff on a loaded machine were that lookup (docs/mrc.md
"Collisions"). The results still carry every spine; a lookup that fails fails the flow."""

from __future__ import annotations

import threading
import time
from typing import Any

from emulator.engine import client
from emulator.errors import RocelabError
from emulator.experiment import flowrun
from emulator.experiment.spec import Flow
from emulator.lab import load_topology


def _flow_run(monkeypatch, resolve, gate: threading.Event | None = None
              ) -> tuple[flowrun.FlowRun, list[str]]:
    plan = load_topology("topologies/clos-2x4-cc.yaml")[1]
    calls: list[str] = []
    n = iter(range(100))

    def transfer(plan, src, dst, job, progress=None, resolve=True) -> dict[str, Any]:
        assert resolve is False  # the flow resolves them itself, beside the next transfer
        i = next(n)
        calls.append(f"transfer {i}")
        if gate is not None and i == 1:
            gate.set()  # the second transfer ran while the first's lookup waited
        return {"qps": [{"qpn": i, "udp_sport": 49152 + i}], "duration_s": 0.0}

    monkeypatch.setattr(client, "transfer", transfer)
    monkeypatch.setattr(client, "resolve_spines", resolve(calls))
    flow = Flow(name="f", src="prefill1", dst="decode1", size="1MiB", repeat=3)
    t0 = time.monotonic()
    return flowrun.FlowRun(plan, flow, t0, t0 + 30), calls


def test_spines_are_resolved_beside_the_next_transfer(monkeypatch):
    gate = threading.Event()

    def resolve(calls):
        def spines(plan, src, dst, res) -> None:
            if res["qps"][0]["qpn"] == 0:
                assert gate.wait(10)  # the first lookup is slow ...
            calls.append(f"spines {res['qps'][0]['qpn']}")
            res["qps"][0]["spine"] = "spine1"
        return spines

    run, calls = _flow_run(monkeypatch, resolve, gate)
    run.run()
    assert calls[:2] == ["transfer 0", "transfer 1"]
    assert sorted(calls) == sorted([f"transfer {i}" for i in range(3)] + [f"spines {i}" for i in range(3)])
    assert run.error is None and [q["spine"] for r in run.results for q in r["qps"]] == ["spine1"] * 3


def test_a_spine_that_cannot_be_resolved_fails_the_flow(monkeypatch):
    def resolve(calls):
        def spines(plan, src, dst, res) -> None:
            raise RocelabError("ip on leaf1 failed: no route")
        return spines

    run, _ = _flow_run(monkeypatch, resolve)
    run.run()
    assert run.error == "ip on leaf1 failed: no route" and run.result is None
