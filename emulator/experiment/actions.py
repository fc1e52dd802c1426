"""Actions on an experiment's timeline: ECN off on a switch, a host that stops
draining, a DCQCN profile change, a fault. Each is recorded with its time."""

from __future__ import annotations

import threading
import time
from typing import Any

from .. import faults  # faults.apply: the entry point `rocelab fail` uses too
from ..congestion.maps import set_ecn
from ..congestion.pause import set_drain
from ..engine import client
from ..errors import RocelabError
from ..plan import Plan
from ..units import parse_duration
from .spec import Action


def apply(plan: Plan, action: Action) -> dict[str, Any]:
    """Carry out one action now; return what was done."""
    kind, args = action.kind, getattr(action, action.kind)
    if kind == "ecn":  # arguments validated and defaulted by spec.Action
        set_ecn(plan, plan.node(args["node"]), args["enabled"])
    elif kind == "drain":
        set_drain(plan, plan.node(args["host"]), args["enabled"])
    elif kind == "dcqcn":
        client.set_dcqcn(plan, plan.node(args["host"]), args["profile"])
    elif kind == "fault":
        return {"kind": kind, **faults.apply(plan, dict(args))}
    return {"kind": kind, **args}


class Timeline(threading.Thread):
    def __init__(self, plan: Plan, actions: list[Action], t0: float):
        super().__init__(name="timeline", daemon=True)
        self.plan, self.t0 = plan, t0
        self.actions = sorted(actions, key=lambda a: parse_duration(a.at))
        self.events: list[dict[str, Any]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        for action in self.actions:
            wait = self.t0 + parse_duration(action.at) - time.monotonic()
            if self._halt.wait(max(0.0, wait)):
                return
            try:
                done = apply(self.plan, action)
            except (RocelabError, OSError, KeyError) as e:
                done = {"kind": action.kind, "error": str(e)}
            self.events.append({"t_s": round(time.monotonic() - self.t0, 4), **done})

    def finish(self, deadline: float) -> None:
        """Let the remaining actions run (a heal must not be skipped), up to `deadline`."""
        self.join(max(0.0, deadline - time.monotonic()))
        self._halt.set()
        self.join()

    def restore(self) -> None:
        """Put every congestion knob an action touched back as the topology configures it,
        so a kept lab runs the next experiment as declared."""
        cp = self.plan.congestion
        if cp is None:
            return
        for a in self.actions:
            args = getattr(a, a.kind)
            try:
                if a.kind == "ecn":
                    set_ecn(self.plan, self.plan.node(args["node"]), cp.ecn_on(args["node"]))
                elif a.kind == "drain":
                    set_drain(self.plan, self.plan.node(args["host"]), True)
                elif a.kind == "dcqcn":
                    client.set_dcqcn(self.plan, self.plan.node(args["host"]),
                                     cp.host_dcqcn(args["host"]))
            except (RocelabError, OSError, KeyError):
                pass  # a bad target was already reported when the action ran
