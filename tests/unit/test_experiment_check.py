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


def _with_action(action: str) -> Experiment:
    import yaml  # as the file is read: YAML 1.1, so a bare `off` is false

    return Experiment.model_validate({"name": "x", "topology": "t.yaml", "flows": [
        {"name": "f", "src": "prefill1", "dst": "decode1", "size": "1MiB"}],
        "actions": [yaml.safe_load(action)]})


def test_a_bare_off_profile_means_off_and_defaults_are_filled():
    (a,) = _with_action("{at: 0s, dcqcn: {host: decode3, profile: off}}").actions
    assert a.dcqcn == {"host": "decode3", "profile": "off"}
    (a,) = _with_action("{at: 0s, drain: {host: decode1}}").actions
    assert a.drain == {"host": "decode1", "enabled": True}


@pytest.mark.parametrize("action, message", [
    ("{at: 0s, dcqcn: {host: decode3, profile: fast}}", "profile: must be one of nvidia, paper, off"),
    ("{at: 0s, ecn: {nod: leaf3}}", "unknown key 'nod'; allowed: node, enabled"),
    ("{at: 0s, drain: {host: decode1, enabled: maybe}}", "enabled: must be true or false"),
])
def test_bad_action_arguments_are_refused_when_read(action, message):
    with pytest.raises(ValueError, match=message):
        _with_action(action)


@pytest.mark.parametrize("action, message", [
    ("{at: 0s, ecn: {node: decode1}}", "actions.0.ecn.node: no switch 'decode1'"),
    ("{at: 0s, dcqcn: {host: spine1}}", "actions.0.dcqcn.host: spine1 is a spine, not a host"),
    ("{at: 0s, drain: {host: decode9}}", "actions.0.drain.host: no host 'decode9'"),
])
def test_actions_name_nodes_of_the_plan(plans, action, message):
    with pytest.raises(RocelabError, match=message.replace(".", r"\.")):
        runner.check(_with_action(action), plans["clos-2x4-cc"])


@pytest.mark.parametrize("doc, message", [
    ({"flows": []}, "flows: list should have at least 1 item"),
    ({"flows": [{"name": "f", "src": "prefill1", "dst": "decode1", "kv": {"model": "gpt9"}}]},
     "flows.0.kv.model: unknown model 'gpt9'; allowed: llama3-8b"),
    ({"flows": [{"name": "f", "src": "prefill1", "dst": "decode1", "kv": {"dtype": "fp4"}}]},
     "flows.0.kv.dtype: unknown dtype 'fp4'"),
    ({"duration": "10s", "flows": [{"name": "f", "src": "prefill1", "dst": "decode1",
                                    "size": "1MiB", "at": "12s"}]},
     "flows: flow 'f' starts at 12s, not before the experiment's duration (10s)"),
])
def test_experiments_that_could_never_run_are_refused_when_read(doc, message):
    """Issue 15 finding 6: these used to pass `check` and fail (or exit 0) only after `up`."""
    from emulator.errors import SpecError
    from emulator.spec import validate

    with pytest.raises(SpecError) as e:
        validate(Experiment, {"name": "x", "topology": "t.yaml"} | doc, "e.yaml")
    assert message in str(e.value) and "\n" not in str(e.value) and len(str(e.value)) < 300


@pytest.mark.parametrize("fault, message", [
    ({"fail": "teleport", "node": "spine1"}, "fail: 'teleport' is not one of link, node, plane, flap"),
    ({"fail": "node", "node": "spine9"}, "no node 'spine9'"),
    ({"fail": "link", "a": "leaf1"}, "fail link: missing key 'b'"),
    ({"heal": "node", "nodes": "spine1"}, "heal node: unknown keys"),
])
def test_fault_actions_parse_before_anything_exists(plans, fault, message):
    exp = Experiment.model_validate({"name": "x", "topology": "t.yaml", "flows": [
        {"name": "f", "src": "prefill1", "dst": "decode1", "size": "1MiB"}],
        "actions": [{"at": "1s", "fault": fault}]})
    with pytest.raises(RocelabError, match=message):
        runner.check(exp, plans["clos-2x4"])


def test_a_flow_too_big_to_hold_in_memory_is_refused_before_anything_exists(plans):
    with pytest.raises(RocelabError, match=r"flows\.f: size: a transfer of 1099511627776 bytes"):
        runner.check(_exp(size="1TiB"), plans["clos-2x4"])
