"""The scale bench's curve and verdict (issue 26): 8 -> 264 routers, the top of the curve at
>= 256 routers and >= 1,024 hosts, and a verdict that fails on any missed figure -- pure."""

from __future__ import annotations

import pytest

from emulator.bench import scale
from emulator.lab import load_topology


def test_the_curve_runs_from_8_to_264_routers_and_the_top_has_1024_hosts():
    plans = {k: load_topology({"name": f"x-{k}"} | shape)[1] for k, shape in scale.FABRICS.items()}
    routers = [len(p.routers) for p in plans.values()]
    assert routers == sorted(routers) and routers[0] == 8 and routers[-1] == 264
    top = plans["r264"]
    assert len(top.hosts) >= 1024 and len(top.aggregates) == len(top.leaf_nodes) == 192
    base = load_topology({"name": "x-base"} | scale.BASELINE[1])[1]
    assert len(base.routers) == 132 and base.aggregates == ()  # a /31 per host, as before


def row(routers=264, hosts=1152, converged_s=80.0, memory_mb=6000, error=0.1):
    return {"routers": routers, "hosts": hosts, "converged_s": converged_s,
            "memory_mb": memory_mb, "estimate_error": error}


def test_the_verdict_holds_when_every_figure_does():
    v = scale.verdict({"small": row(routers=8, hosts=24, converged_s=2, error=-0.15),
                       "top": row()})
    assert v["meets_target"] and v["worst_estimate_error"] == 0.15


@pytest.mark.parametrize("bad", [{"converged_s": 91.0}, {"memory_mb": 12 * 1024 + 1},
                                 {"hosts": 1000}, {"routers": 200}, {"error": -0.25}])
def test_the_verdict_fails_on_any_missed_figure(bad):
    assert not scale.verdict({"small": row(routers=8, hosts=24), "top": row(**bad)})["meets_target"]
