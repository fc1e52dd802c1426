"""An example topology test suite, written as a rocelab user would (docs/api.md).

Run it with `pytest examples/` as root: the `rocelab_lab` fixture comes from the
plugin that ships with the package; the lab is brought up once for this module and
always torn down. The project's own CI runs this file.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FABRIC = Path(__file__).with_name("my-fabric.yaml")
# The project's CI runs this beside its own suite: the labs carry the suite's name prefix
# (ROCELAB_TEST_PREFIX), so two suites on one machine never share a lab name.
PREFIX = os.environ.get("ROCELAB_TEST_PREFIX", "ex-")
pytestmark = pytest.mark.rocelab  # skipped, saying why, without root or FRR


@pytest.fixture(scope="module")
def fabric(rocelab_lab):
    return rocelab_lab(FABRIC, name=f"{PREFIX}fabric")


def test_the_fabric_is_healthy_and_meets_its_own_expectations(fabric):
    assert fabric.status()["healthy"]
    failed = [(c.name, c.problems) for c in fabric.validate() if not c.ok]
    assert not failed


def test_after_failing_spine1_every_leaf_has_ecmp_1_and_the_kv_transfer_stays_intact(fabric):
    event = fabric.fail_node("spine1")  # returns once routing went around it
    try:
        assert event["convergence"]["settled"]
        for leaf in fabric.leaves:
            remote = [h for h in fabric.hosts if fabric.node(h).leaf != leaf]
            assert {fabric.ecmp(leaf, h) for h in remote} == {1}, leaf
        assert fabric.status()["converged"] and not fabric.status()["healthy"]
        res = fabric.transfer("prefill1", "decode1", size="16MiB", qps=4)
        assert res["integrity_ok"] and {q["spine"] for q in res["qps"]} == {"spine2"}
    finally:
        fabric.heal()
    assert all(fabric.ecmp("leaf1", h) == 2 for h in ("decode1", "decode2"))


def test_a_topology_can_be_built_in_code(rocelab_function_lab):
    lab = rocelab_function_lab({"name": f"{PREFIX}tiny", "spines": 1, "leaves": 2,
                                "hosts": {"per_leaf": 1}, "addressing": "numbered"})
    assert lab.status()["healthy"] and lab.vtysh("leaf1", "show bgp summary json",
                                                 json=True)["ipv4Unicast"]["peerCount"] == 1
