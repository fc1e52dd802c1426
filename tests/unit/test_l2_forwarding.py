"""Issue 24 (11): on l2, `heal --json` said settled and `status` right after said not
healthy. heal waited only for the STP port states, while status also pings every host:
a bridge that learned a host's MAC on the old tree still sends that host's frames where
they are dropped until the entry ages out. Both now judge a switch with one function,
faults.mismatched, over the same read (converge.bridge_forwarding): port states and the
port each host MAC was learned on."""

from __future__ import annotations

import pytest

from emulator import converge, faults, status
from emulator.bridge import PortState
from emulator.faults import recovery
from emulator.lab import load_topology

WHOLE = {"cut_links": [], "failed_nodes": []}


@pytest.fixture(scope="module")
def plan():
    return load_topology("topologies/l2-2x4.yaml")[1]


def _read(plan, node: str, fdb: dict[str, str]) -> dict:
    """A bridge read (bridge.bridge_state's shape) with every port where the tree has it."""
    tree = plan.stp_tree()[node]
    ports = [PortState(p, st, "designated") for p, st in tree.items()]
    return {"root": "8000.x", "bridge_id": "8000.y", "is_root": False, "ports": ports,
            "macs_learned": len(fdb), "mac_table_limit": None, "fdb": fdb}


def _mac(plan, host: str) -> str:
    return plan.node(host).interfaces[0].mac


def test_the_target_has_each_host_mac_on_the_port_toward_it_along_the_tree(plan):
    want = faults.expected_forwarding(plan, WHOLE)
    assert want["leaf1"]["mac " + _mac(plan, "decode3")] == "spine1"  # up to the root
    assert want["leaf1"]["mac " + _mac(plan, "prefill1")] == "prefill1"
    # spine2 keeps only its link to leaf1: no host behind it, it sees other hosts' frames
    # only as flood copies, so what it learned does not matter
    assert not [k for k in want["spine2"] if k.startswith("mac ")]


def test_heal_deletes_only_the_host_macs_learned_off_the_settled_tree(plan, monkeypatch):
    """The kernel's short ageing left an entry on a blocked port for 30 s after a heal (the
    default ageing is 300 s): settle deletes what contradicts the tree once it has settled."""
    from emulator import bridge
    gone = {}
    monkeypatch.setattr(bridge, "forget_macs", lambda node, entries: gone.update({node.name: entries}))
    want = faults.expected_forwarding(plan, WHOLE)
    d3, p1 = _mac(plan, "decode3"), _mac(plan, "prefill1")
    current = {sw: converge.bridge_forwarding(plan, _read(plan, sw, {})) for sw in want}
    current["leaf1"] = converge.bridge_forwarding(plan, _read(plan, "leaf1", {d3: "spine2", p1: "prefill1"}))
    current["spine2"] = converge.bridge_forwarding(plan, _read(plan, "spine2", {d3: "leaf2"}))
    current["leaf2"]["spine2"] = "listening"  # a port moving again meanwhile: not a MAC
    recovery._forget_stale(plan, current, want)
    assert gone == {"leaf1": [(d3, "spine2")]}


@pytest.mark.parametrize("fdb, settled", [
    ({}, True),  # nothing learned: frames flood, and reach the host
    ({"decode3": "spine1", "prefill1": "prefill1"}, True),
    ({"decode3": "spine2"}, False),  # learned before the tree moved: a dead end now
])
def test_heal_and_status_judge_a_switch_by_one_definition(plan, monkeypatch, fdb, settled):
    read = _read(plan, "leaf1", {_mac(plan, h): port for h, port in fdb.items()})
    monkeypatch.setattr(converge, "read_bridge", lambda _plan, _node: dict(read))
    want = faults.expected_forwarding(plan, WHOLE)
    have = converge.bridge_forwarding(plan, read)
    # what fail/heal wait for (the watcher's samples, all switches as planned but leaf1) ...
    samples = {sw: converge.bridge_forwarding(plan, _read(plan, sw, {})) for sw in want}
    assert recovery._matches(samples | {"leaf1": have}, want) is settled
    # ... is what status calls converged (and so healthy can follow)
    row = status.bridge_status(plan, plan.node("leaf1"), WHOLE, want["leaf1"])  # type: ignore[arg-type]
    assert row["converged"] is settled
    assert "fdb" not in row  # the read's MAC table is not dumped into status
