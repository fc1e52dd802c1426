"""bgp.aggregate_hosts (issue 26): a leaf announces one /24 for its hosts instead of a /31
per host NIC -- the plan, the rendered bgpd config and the FIB the poll expects."""

from __future__ import annotations

import pytest

from emulator.errors import SpecError
from emulator.lab import load_topology
from emulator.plan import Kind

BASE = {"name": "agg", "spines": 2, "leaves": 4, "hosts": {"per_leaf": 2}}


def aggregated(**more):
    return load_topology(BASE | {"bgp": {"aggregate_hosts": True}} | more)


def test_off_by_default_every_host_nic_is_its_own_prefix():
    _, plan, rendered = load_topology(BASE)
    assert plan.aggregates == ()
    assert len(plan.fib_prefixes(plan.node("spine1"))) == 8  # a /31 per host
    assert "aggregate-address" not in rendered.files["leaf1"]["bgpd.conf"]


def test_each_leaf_announces_its_slash24_and_keeps_the_slash31s_home():
    _, plan, rendered = aggregated()
    assert plan.aggregates == tuple((f"leaf{i}", f"10.2.{i - 1}.0/24") for i in range(1, 5))
    assert "  aggregate-address 10.2.0.0/24 summary-only\n" in rendered.files["leaf1"]["bgpd.conf"]
    assert "aggregate-address" not in rendered.files["spine1"]["bgpd.conf"]
    # every host NIC's /31 lies inside its leaf's /24
    for h in plan.hosts:
        assert h.interfaces[0].address.startswith(dict(plan.aggregates)[h.leaf][:-5])


def test_the_poll_expects_the_slash24s_at_full_width():
    _, plan, _ = aggregated()
    assert plan.fib_prefixes(plan.node("leaf1")) == ["10.2.1.0/24", "10.2.2.0/24", "10.2.3.0/24"]
    widths = plan.expected_widths()
    assert widths["leaf1"] == {"10.2.1.0/24": 2, "10.2.2.0/24": 2, "10.2.3.0/24": 2}
    assert set(widths["spine1"].values()) == {1}


def test_a_leafs_slash24_lives_while_any_of_its_host_links_does():
    _, plan, _ = aggregated()
    one = frozenset({frozenset(("leaf1", "prefill1"))})
    assert plan.expected_widths(cut=one)["leaf2"]["10.2.0.0/24"] == 2
    both = one | {frozenset(("leaf1", "prefill2"))}
    assert plan.expected_widths(cut=both)["leaf2"]["10.2.0.0/24"] == 0


def test_dual_homed_hosts_keep_their_own_slash32():
    _, plan, rendered = aggregated(hosts={"per_leaf": 2, "dual_homed": True})
    prefixes = plan.fib_prefixes(plan.node("spine1"))
    assert [p for p in prefixes if p.endswith("/24")] == [b for _, b in plan.aggregates]
    assert sum(p.endswith("/32") for p in prefixes) == len(plan.hosts)
    assert "redistribute static" in rendered.files["leaf1"]["bgpd.conf"]


def test_a_three_tier_fabric_aggregates_every_leaf():
    _, plan, _ = load_topology({"name": "agg3", "pods": 2, "superspines": 2, "spines": 2,
                                "leaves": 2, "hosts": {"per_leaf": 2},
                                "bgp": {"aggregate_hosts": True}})
    assert len(plan.aggregates) == len(plan.of_kind(Kind.LEAF)) == 4
    assert set(plan.expected_widths()["super1"].values()) == {2}  # both spines of a pod


@pytest.mark.parametrize("fabric", ["l2", "evpn"])
def test_a_stretched_segment_has_no_host_prefixes_to_aggregate(fabric):
    with pytest.raises(SpecError, match=r"bgp\.aggregate_hosts: only fabric l3"):
        load_topology(BASE | {"fabric": fabric, "bgp": {"aggregate_hosts": True}})
