"""An experiment against a plan, before anything exists: its flows name hosts (and
spines) the plan has and fit its duration, its actions name switches, hosts, nodes
and links the plan has, and what needs a congestion plane (or a trace) has one.

`rocelab check` and `rocelab run` call `check` on the static plan (a bad experiment
creates nothing), and again on a running lab's own plan.
"""

from __future__ import annotations

from typing import Any

from .. import faults, workload
from ..errors import RocelabError
from ..plan import Kind, Plan
from ..units import parse_duration
from . import replaying
from .flowrun import job_of
from .spec import Experiment


def check(exp: Experiment, plan: Plan) -> None:
    """Flows name hosts (and spines) of this plan; actions name its switches and hosts
    (faults: nodes and links it has); congestion actions need a congestion plane."""
    spines = [n.name for n in plan.of_kind(Kind.SPINE)]
    for f in exp.flows:
        workload.host(plan, f.src, option=f"flows.{f.name}.src")
        workload.host(plan, f.dst, option=f"flows.{f.name}.dst")
        if f.via is not None and f.via not in spines:
            raise RocelabError(f"flows.{f.name}.via: no spine {f.via!r}; spines: {', '.join(spines)}")
        try:  # the job the flow will run: its own limits, and done before the run ends
            left = parse_duration(exp.duration) - parse_duration(f.at)
            workload.check_duration(plan, job_of(f, left, plan.dilation), plan.node(f.src),
                                    bound="the experiment's duration after its start")
        except RocelabError as e:
            raise RocelabError(f"flows.{f.name}: {str(e).lstrip('-')}") from None
    switches = {n.name for n in plan.routers}
    for i, a in enumerate(exp.actions):
        args = a.args
        if a.kind == "ecn" and args["node"] not in switches:
            raise RocelabError(f"actions.{i}.ecn.node: no switch {args['node']!r}; "
                               f"switches: {', '.join(sorted(switches))}")
        if a.kind in ("drain", "dcqcn", "broadcast", "churn"):
            workload.host(plan, args["host"], option=f"actions.{i}.{a.kind}.host")
        if a.kind == "stp" and not a.args["enabled"] and plan.fabric.value == "l2" \
                and plan.congestion is None and len(spines) > 1:
            raise RocelabError(f"actions.{i}.stp: STP off on {plan.lab} makes a loop on unshaped "
                               "links, a storm as fast as the CPUs go: use a topology with "
                               "`congestion: enabled: true` (every port shaped)")
        if a.kind == "fault":
            _fault_target(plan, args, f"actions.{i}.fault")
        if a.kind == "vtysh" and args["node"] not in {n.name for n in plan.frr_nodes}:
            routers = ", ".join(n.name for n in plan.frr_nodes) or "none: fabric l2 runs no FRR"
            raise RocelabError(f"actions.{i}.vtysh.node: no router running FRR named "
                               f"{args['node']!r}; routers: {routers}")
    _needs(exp, plan)


def _needs(exp: Experiment, plan: Plan) -> None:
    """Congestion actions need a congestion plane; a replay its trace, pools and shaping."""
    needs_cc = [a.kind for a in exp.actions if a.kind in ("ecn", "drain", "dcqcn")]
    if needs_cc and plan.congestion is None:
        raise RocelabError(f"experiment {exp.name}: actions {', '.join(needs_cc)} need a topology "
                           "with `congestion: enabled: true`")
    if exp.replay is not None:
        replaying.check(exp.replay, plan)


def _fault_target(plan: Plan, args: dict[str, Any], field: str) -> None:
    """A fault action parses as it will when it runs: its verb, its keys, a node or link this
    plan has (the fault model's own checks)."""
    try:
        faults.parse_action(plan, dict(args))
    except faults.FaultError as e:
        e.args = (f"{field}: {e}",)
        raise
