"""Values the spec refuses up front that once passed `render` and failed (or crashed) later:
reserved ASNs (issue 24: `leaf1: 23456` failed `up` after 25 s with a 44-line error)."""

from __future__ import annotations

import jsonschema
import pytest

from emulator.errors import SpecError
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
