"""Values the spec refuses up front that once passed `render` and failed (or crashed) later:
reserved ASNs (issue 24: `leaf1: 23456` failed `up` after 25 s with a 44-line error)."""

from __future__ import annotations

import jsonschema
import pytest

from emulator.errors import SpecError
from emulator.names import is_lab_name, is_node_name
from emulator.plan import compile_plan
from emulator.spec import json_schema, parse


def plan_of(data: dict):
    return compile_plan(parse(data, "t.yaml"), "t.yaml")


@pytest.mark.parametrize("asn", [64512, 65534, 4200000000, 4294967294, 1, 65010, 131072])
def test_private_and_public_asns_are_allowed(asn):
    p = plan_of({"name": "lab", "asn": {"overrides": {"leaf1": asn}}})
    assert p.node("leaf1").asn == asn


@pytest.mark.parametrize("asn", [23456, 64496, 64511, 65535, 65536, 65551, 65552, 131071])
@pytest.mark.parametrize("where", [
    lambda a: {"asn": {"overrides": {"leaf1": a}}},
    lambda a: {"overrides": {"leaf1": {"asn": a}}},
    lambda a: {"asn": {"spine": a}},
    lambda a: {"asn": {"superspine": a}, "pods": 2, "superspines": 1},
    lambda a: {"asn": {"leaf_base": a}},
    lambda a: {"nodes": {"leaf1": {"kind": "leaf", "asn": a}}, "links": []},
])
def test_reserved_asns_are_refused_wherever_an_asn_is_given(asn, where):
    with pytest.raises(SpecError, match=rf"\basn\S*: must not be a reserved ASN: {asn} is .*; "
                       r"use a private ASN \(64512-65534 or 4200000000-4294967294\)"):
        plan_of({"name": "lab"} | where(asn))


@pytest.mark.parametrize("asn", [0, 4294967295])
def test_the_first_and_last_asn_are_out_of_range(asn):
    with pytest.raises(SpecError, match="asn.spine: input should be"):
        plan_of({"name": "lab", "asn": {"spine": asn}})


def test_the_schema_carries_the_reserved_ranges():
    schema = json_schema()
    doc = {"name": "lab", "asn": {"overrides": {"leaf1": 23456}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema)
    jsonschema.validate({"name": "lab", "asn": {"overrides": {"leaf1": 64512}}}, schema)


@pytest.mark.parametrize("name", ["lab", "clos-2x4", "a" * 15 + "-x", "a-b-c", "x" * 24,
                                  "", "Lab", "1lab", "lab-", "a--b", "lab/x", "lab\n",
                                  "a" * 16, "a-" + "b" * 22, "lab.x"])
def test_the_schema_says_what_the_lab_name_rule_says(name):
    # names.py is the one rule: the validator and `rocelab schema` must agree on every name
    schema = json_schema()
    valid = jsonschema.Draft202012Validator(schema).is_valid({"name": name})
    assert valid == is_lab_name(name)


@pytest.mark.parametrize("node, ok", [("leaf1", True), ("x", True), ("abcdefghijkl", True),
                                      ("abcdefghijklm", False), ("Leaf1", False),
                                      ("1leaf", False), ("leaf-1", False), ("", False)])
def test_the_schema_says_what_the_node_name_rule_says(node, ok):
    schema = json_schema()
    doc = {"name": "lab", "nodes": {node: {"kind": "leaf"}}, "links": []}
    assert jsonschema.Draft202012Validator(schema).is_valid(doc) is ok
    assert is_node_name(node) is ok


NAN, INF = float("nan"), float("inf")


def one_line_error(fn) -> str:
    with pytest.raises(SpecError) as err:  # never OverflowError, ValueError or a traceback
        fn()
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize("dilation, problem", [
    (1.0e-300, "greater than or equal to 1"), (0.5, "greater than or equal to 1"),
    (NAN, "greater than or equal to 1"), (0, "greater than or equal to 1"),
    (1e308, "would shape links at"), (INF, "would shape links at"),
])
def test_dilation_is_a_bounded_number(dilation, problem):
    # issue 24: dilation 1.0e-300 raised OverflowError (a traceback) while planning
    doc = {"name": "lab", "congestion": {"enabled": True, "dilation": dilation}}
    assert problem in one_line_error(lambda: plan_of(doc))
    assert "congestion.dilation" in one_line_error(lambda: plan_of(doc))


@pytest.mark.parametrize("key, value", [
    ("rate_ai", INF), ("rate_ai", 1e308), ("min_rate", NAN), ("increase_timer", 1e308),
    ("increase_timer", "1e400"), ("cnp_interval", INF), ("alpha_period", "2s"), ("g", NAN),
    ("byte_counter", "1.5"),
])
def test_dcqcn_overrides_are_finite_and_sane(key, value):
    doc = {"name": "lab", "congestion": {"enabled": True, "dcqcn": {"overrides": {key: value}}}}
    assert f"congestion.dcqcn.overrides.{key}: " in one_line_error(lambda: plan_of(doc))


def test_the_extremes_that_are_still_fine_plan():
    plan_of({"name": "lab", "congestion": {"enabled": True, "dilation": 1, "dcqcn": {
        "overrides": {"increase_timer": "1s", "rate_ai": 99e12, "g": 1}}}})


@pytest.mark.parametrize("field, value", [
    ("duration", NAN), ("duration", INF), ("duration", "1e400"), ("duration", 1e308),
    ("sample_every", NAN), ("steady_after", "1e9"), ("flows.0.at", NAN), ("flows.0.at", INF),
    ("flows.0.ack_timeout", 1e308), ("flows.0.size", "1.5"),
])
def test_experiment_quantities_are_finite(field, value):
    from emulator.experiment.spec import Experiment
    from emulator.spec import validate

    doc: dict = {"name": "e", "topology": "t.yaml",
                 "flows": [{"name": "f", "src": "prefill1", "dst": "decode1", "size": "1MiB"}]}
    if field.startswith("flows.0."):
        doc["flows"][0][field.split(".")[-1]] = value
    else:
        doc[field] = value
    where = "flows.0" if field == "flows.0.size" else field  # size: checked with kv
    assert one_line_error(lambda: validate(Experiment, doc, "e.yaml")).startswith(
        f"e.yaml: {where}: ")


def test_a_fabric_past_16_bit_private_space_numbers_its_leaves_4_byte_private():
    # 8 pods x 64 leaves from 65101 would reach 65535 (reserved) at leaf435
    p = plan_of({"name": "lab", "pods": 8, "leaves": 64, "spines": 2, "superspines": 2,
                 "hosts": {"per_leaf": 0}, "pools": {"loopbacks": "10.0.0.0/22", "hosts": "10.16.0.0/12"}})
    leaves = [n for n in p.nodes if n.kind.value == "leaf"]
    assert [leaves[0].asn, leaves[-1].asn] == [4200000000, 4200000000 + 511]
    assert plan_of({"name": "lab", "leaves": 64}).node("leaf64").asn == 65164  # as before
    with pytest.raises(SpecError, match="asn.leaf_base: leaf436 would get ASN 65535"):
        plan_of({"name": "lab", "pods": 8, "leaves": 64, "spines": 2, "superspines": 2,
                 "hosts": {"per_leaf": 0}, "pools": {"loopbacks": "10.0.0.0/22", "hosts": "10.16.0.0/12"},
                 "asn": {"leaf_base": 65100}})  # another base: the user's numbers, checked


def test_a_renamed_big_fabric_numbers_its_leaves_as_the_file_does():
    # `up --name` re-validates the dumped spec, where leaf_base reads as given: the
    # default must still move past 16-bit space (a CI run's `up too-big.yaml --name`
    # failed on leaf435's 65535 instead of the memory estimate's exit 12)
    from emulator.lab import plan_topology  # load_topology's path, without rendering 800 routers

    _, plan = plan_topology("tests/fixtures/too-big.yaml", name="renamed")
    leaves = [n for n in plan.nodes if n.kind.value == "leaf"]
    assert leaves[0].asn == 4200000000


def test_an_explicit_fabric_without_nodes_is_one_line_error():
    # nodes: {} once crashed planning ("max() arg is an empty sequence") before this check
    problem = one_line_error(lambda: plan_of({"name": "lab", "nodes": {}, "links": []}))
    assert "nodes: must name at least one node" in problem
