"""An experiment is checked against the topology's plan before anything is created."""

from __future__ import annotations

import pytest

from emulator.errors import RocelabError
from emulator.experiment import runner
from emulator.experiment.spec import Experiment
from emulator.lab import load_topology


@pytest.fixture(scope="module")
def plans():
    return {t: load_topology(f"topologies/{t}.yaml")[1] for t in ("clos-2x4", "clos-2x4-cc")}


def _exp(**flow) -> Experiment:
    return Experiment.model_validate({"name": "x", "topology": "t.yaml", "flows": [
        {"name": "f", "src": "prefill1", "dst": "decode1", "size": "1MiB", **flow}]})


@pytest.mark.parametrize("flow, message", [
    ({"via": "spine9"}, "flows.f.via: no spine 'spine9'; spines: spine1, spine2"),
    ({"via": "leaf1"}, "flows.f.via: no spine 'leaf1'"),
    ({"src": "prefill9"}, "flows.f.src: no host 'prefill9'"),
    ({"dst": "leaf3"}, "flows.f.dst: leaf3 is a leaf, not a host"),
])
def test_bad_flows_are_refused_naming_the_field(plans, flow, message):
    with pytest.raises(RocelabError, match=message.replace(".", r"\.")):
        runner.check(_exp(**flow), plans["clos-2x4-cc"])


def test_a_good_flow_passes_and_congestion_actions_need_a_congestion_plane(plans):
    runner.check(_exp(via="spine2"), plans["clos-2x4-cc"])
    exp = Experiment.model_validate({"name": "x", "topology": "t.yaml", "flows": [
        {"name": "f", "src": "prefill1", "dst": "decode1", "size": "1MiB"}],
        "actions": [{"at": "1s", "ecn": {"node": "leaf3", "enabled": False}}]})
    runner.check(exp, plans["clos-2x4-cc"])
    with pytest.raises(RocelabError, match="need a topology with `congestion: enabled: true`"):
        runner.check(exp, plans["clos-2x4"])
