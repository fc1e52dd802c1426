"""Property-based fuzz of topology and experiment files (issue 15).

Every input, however hostile, ends in a plan or in one short SpecError line, within a
time bound; nothing else (no traceback type escapes). CI runs a fixed, derandomized
sample; `make fuzz` runs many more examples with fresh randomness
(ROCELAB_FUZZ_EXAMPLES, ROCELAB_FUZZ_RANDOM=1).
"""

from __future__ import annotations

import os
import time
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emulator.errors import RocelabError
from emulator.experiment import runner
from emulator.experiment.spec import Experiment
from emulator.lab import load_topology
from emulator.plan.congestion import OVERRIDES
from emulator.spec import validate

EXAMPLES = int(os.environ.get("ROCELAB_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                derandomize=os.environ.get("ROCELAB_FUZZ_RANDOM") != "1",
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
BOUND_S = 5.0  # any one input: a plan or an error well within this

# Leaves: the kinds of values a careless or hostile user writes.
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
    st.sampled_from(["400G", "9" * 300 + "G", "1e12", ".inf", "0.0.0.0/16", "10.2.0.0/16",
                     "150KB", "-4", "l2", "evpn", "l3", "spine1", "leaf9", "rtb\n", "fp8",
                     "llama3-8b", "1s", "90s", "write", "teleport"]))
TOPO_KEYS = ["name", "fabric", "addressing", "spines", "leaves", "hosts", "links", "bfd", "bgp",
             "asn", "pools", "congestion", "l2", "validate", "per_leaf", "roles", "speed", "mtu",
             "enabled", "dilation", "max_link_rate", "pfc", "ecn", "xoff", "xon", "stp", "root",
             "forward_delay", "max_age", "hello_time", "mac_table_limit", "vni", "leaf_base",
             "overrides", "loopbacks", "fabric_pool", "junk"]
EXP_KEYS = ["name", "topology", "fabrics", "duration", "flows", "actions", "expect", "src",
            "dst", "size", "kv", "model", "tokens", "dtype", "at", "qps", "via", "repeat",
            "fault", "fail", "heal", "node", "a", "b", "stp", "broadcast", "churn", "host",
            "frames", "pps", "ack_timeout", "rate", "phases", "junk"]


# Numbers at the edges of a float and quantities that only look whole (issue 24: dilation
# 1.0e-300 overflowed while planning, --size 1.5 moved 1 byte, .nan passed every bound).
EXTREMES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e-300, 5e-324, 1e308, -1e308, 1e-12, 0.5, 0, 1, 2**64, "1e400", "1e-300",
                     "1e308", "1.5", "0.3KiB", "1e308G", "9" * 30 + "G", "0.5M", "1K", ".nan",
                     "169h", "1e9s", "100T", "4GiB", "1.5us"]))


def _some(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


def shaped_topologies() -> st.SearchStrategy[dict[str, Any]]:
    """A congestion lab whose every number may be extreme: the arithmetic of the plan."""
    overrides = st.dictionaries(st.sampled_from(sorted(OVERRIDES)), EXTREMES, max_size=4)
    congestion = _some(dilation=EXTREMES, max_link_rate=EXTREMES, buffer=EXTREMES,
                       ecn=_some(kmin=EXTREMES, kmax=EXTREMES, pmax=EXTREMES),
                       pfc=_some(xoff=EXTREMES, xon=EXTREMES, buffer=EXTREMES),
                       dcqcn=_some(overrides=overrides))
    return st.builds(lambda c, links: {"name": "fz", "links": links,
                                       "congestion": {"enabled": True, **c}},
                     congestion, _some(speed=EXTREMES, mtu=EXTREMES))


def extreme_experiments() -> st.SearchStrategy[dict[str, Any]]:
    flow = st.builds(lambda f: {"name": "f", "src": "prefill1", "dst": "decode1", "size": "1MiB",
                                **f},
                     _some(at=EXTREMES, size=EXTREMES, rate=EXTREMES, ack_timeout=EXTREMES))
    return st.builds(lambda top, flows: {"name": "fz", "topology": "t.yaml", "flows": flows, **top},
                     _some(duration=EXTREMES, sample_every=EXTREMES, steady_after=EXTREMES),
                     st.lists(flow, min_size=1, max_size=2))


def documents(keys: list[str]) -> st.SearchStrategy[Any]:
    return st.recursive(
        SCALARS,
        lambda inner: st.one_of(st.lists(inner, max_size=4),
                                st.dictionaries(st.sampled_from(keys), inner, max_size=6)),
        max_leaves=25)


def topologies() -> st.SearchStrategy[dict[str, Any]]:
    base = st.fixed_dictionaries({"name": st.sampled_from(["fz", "fz-a", "Fz", "rtb\n", ""])})
    return st.builds(lambda b, extra: {**b, **extra}, base,
                     st.dictionaries(st.sampled_from(TOPO_KEYS), documents(TOPO_KEYS), max_size=6))


def _one_line_or_plan(fn: Any) -> None:
    t = time.monotonic()
    try:
        fn()
    except RocelabError as e:  # SpecError and friends: the documented way to say no
        text = str(e)
        assert "\n" not in text, text
        assert len(text) < 600, text[:200]
    assert time.monotonic() - t < BOUND_S


@FUZZ
@given(topologies())
def test_any_topology_document_plans_or_fails_in_one_line(doc):
    _one_line_or_plan(lambda: load_topology(doc))


@FUZZ
@given(topologies())
def test_any_topology_file_plans_or_fails_in_one_line(tmp_path_factory, doc):
    path = tmp_path_factory.mktemp("fz") / "t.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    _one_line_or_plan(lambda: load_topology(path))


@FUZZ
@given(st.binary(max_size=300))
def test_any_bytes_as_a_topology_file_fail_in_one_line(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("fz") / "t.yaml"
    path.write_bytes(blob)
    _one_line_or_plan(lambda: load_topology(path))


@FUZZ
@given(st.dictionaries(st.sampled_from(EXP_KEYS), documents(EXP_KEYS), max_size=8))
def test_any_experiment_is_checked_or_fails_in_one_line(doc):
    plan = load_topology("topologies/clos-2x4.yaml")[1]

    def check() -> None:
        exp = validate(Experiment, {"name": "fz", "topology": "t.yaml"} | doc, "e.yaml")
        runner.check(exp, plan)

    _one_line_or_plan(check)


@FUZZ
@given(shaped_topologies())
def test_extreme_numbers_in_a_shaped_topology_plan_or_fail_in_one_line(doc):
    _one_line_or_plan(lambda: load_topology(doc))


@FUZZ
@given(extreme_experiments())
def test_extreme_numbers_in_an_experiment_are_checked_or_fail_in_one_line(doc):
    plan = load_topology("topologies/clos-2x4-cc.yaml")[1]

    def check() -> None:
        runner.check(validate(Experiment, doc, "e.yaml"), plan)

    _one_line_or_plan(check)
