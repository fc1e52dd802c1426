"""diagnose on evidence recorded from real runs of experiments/diagnose/ (reference
machine; `compact.py` in the fixtures says how they were made): each injected cause is
ranked first with the right node, port and flow; the healthy incast finds nothing above
info. The same rules run live in tests/integration/test_diagnose.py."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from emulator.diagnose import Severity, diagnose, worst
from emulator.diagnose.evidence import Evidence

FIXTURES = Path(__file__).parent / "fixtures" / "diagnose"


def load(name: str) -> Evidence:
    return Evidence.from_json(json.loads(gzip.decompress((FIXTURES / f"{name}.json.gz").read_bytes())))


# experiment -> (kind ranked first, what its `where` starts with, flows it must name)
EXPECTED = {
    "ecn-off": ("ecn-off", ["leaf3", "leaf3:decode1"], {"p1", "p2", "p3", "p4"}),
    "pause-storm": ("pause-storm", ["leaf3", "leaf3:decode1"], {"unrelated"}),
    "dcqcn-off-host": ("dcqcn-off-host", ["prefill2"], {"p2"}),
    "ecmp-collision": ("ecmp-collision", ["spine2", "spine2:leaf4"], {"c1", "c2", "c3", "c4"}),
    "routing": ("routing", [], set()),
    "gray-link": ("gray-link", ["leaf1", "spine1"], {"lossy"}),
    "lossless-drops": ("lossless-drops", ["leaf3", "leaf3:decode1"], {"p1", "p2", "p3", "p4"}),
    "mtu-mismatch": ("mtu-mismatch", ["spine2"], {"through-spine2"}),
    "congested-spine": ("congested-spine", ["spine1", "spine1:leaf3"], {"via-spine1"}),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_injected_cause_ranks_first(name):
    kind, where, flows = EXPECTED[name]
    found = diagnose(load(name))
    first = found[0]
    assert first.kind == kind, [(f.kind, f.cause) for f in found]
    assert first.where[:len(where)] == where, first.where
    assert flows <= set(first.affected["flows"]), first.affected
    assert first.severity >= Severity.WARNING


def test_the_healthy_incast_has_nothing_above_info():
    found = diagnose(load("healthy-incast"))
    assert worst(found) is Severity.INFO, [(f.severity, f.cause) for f in found]


def test_ecn_off_names_only_the_switch_that_is_off():
    ev = load("ecn-off")
    found = [f for f in diagnose(ev) if f.kind == "ecn-off"]
    assert [f.where[0] for f in found] == ["leaf3"]
    assert not [f for f in diagnose(load("pause-storm")) if f.kind == "ecn-off"]


def test_the_pause_storm_origin_is_the_host_and_the_spread_is_in_time_order():
    f = diagnose(load("pause-storm"))[0]
    assert "decode1 stopped draining" in f.cause
    times = [e["at_s"] for e in f.evidence if e["counter"] == "pause_tx_frames" and "at_s" in e]
    assert times == sorted(times) and len(times) >= 4


def test_routing_names_both_ends_of_the_failed_link():
    causes = [f.cause for f in diagnose(load("routing")) if f.kind == "routing"]
    assert "BGP session leaf2 -> spine2 is down" in causes
    assert "BGP session spine2 -> leaf2 is down" in causes


def test_narrowing_to_a_flow_keeps_its_path_only():
    ev = load("mtu-mismatch")
    assert [f.kind for f in diagnose(ev, flow="through-spine2")][0] == "mtu-mismatch"
    assert "mtu-mismatch" not in [f.kind for f in diagnose(ev, flow="through-spine1")]


def test_evidence_round_trips_through_json():
    ev = load("routing")
    assert Evidence.from_json(json.loads(json.dumps(ev.as_json()))) == ev
