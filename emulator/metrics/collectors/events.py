"""Faults and experiment actions in force, as metrics (Grafana annotations, diagnose).

fetch: the lab's `faults.json` (written by `rocelab fail`/`heal` and by an
experiment's fault actions; emulator/faults/inject.py) and `actions.json`
(written by an experiment's timeline; emulator/experiment/actions.py), as
text, without their locks: both are replaced atomically. No kernel scan: a
fault put in force behind rocelab's back (a port downed by hand) is not
here; `rocelab status` finds those.
parse: one `rocelab_fault_active` per recorded fault (kind link|node,
target "leaf1-spine1" or "spine1", how: carrier, silent, or the gray
effects), fail and heal events so far; one `rocelab_action_active` per knob
an action holds away from the topology's declaration, actions applied so far.
"""

from __future__ import annotations

import json
from typing import Any

from ...faults.model import Fault, FaultKind
from ...paths import lab_run_dir
from ...plan import Plan
from ..model import Families, Family, Kind, Source

NAME = "events"
FAULTS_FILE = "faults.json"  # emulator/faults/inject.py
ACTIONS_FILE = "actions.json"  # emulator/experiment/actions.py (ACTIONS_FILE)


class Collector(Source):
    name = NAME

    def fetch(self) -> dict[str, str]:
        run_dir = lab_run_dir(self.plan.lab)
        out = {}
        for key, name in (("faults", FAULTS_FILE), ("actions", ACTIONS_FILE)):
            try:
                out[key] = (run_dir / name).read_text()
            except FileNotFoundError:  # nothing failed / no experiment ran yet
                out[key] = ""
        return out

    @staticmethod
    def parse(raw: dict[str, str], plan: Plan) -> list[Family]:
        fams = Families(plan.lab)
        _faults(fams, json.loads(raw.get("faults") or "{}"))
        _actions(fams, json.loads(raw.get("actions") or "{}"))
        return fams.as_list()


def _faults(fams: Families, doc: dict[str, Any]) -> None:
    # declared even when empty: the exposition names it (HELP, TYPE) whatever happened
    active = fams.gauge("rocelab_fault_active",
                        "1 per fault in force that rocelab recorded (fail/heal, experiments).")
    for record in doc.get("active", []):
        f = Fault.from_json(record)
        target = f"{f.a}-{f.b}" if f.kind is FaultKind.LINK else f.a
        active.add(fams.labels(kind=f.kind.value, target=target, how=f.how() or "carrier"), 1)
    counts = {"fail": 0, "heal": 0}
    for event in doc.get("events", []):
        if event.get("action") in counts:
            counts[event["action"]] += 1
    for action, n in counts.items():
        fams.add(Kind.COUNTER, "rocelab_fault_events_total",
                 "Fail and heal events recorded for the lab (a flap: one of each per cycle).", n,
                 fams.labels(action=action))


def _actions(fams: Families, doc: dict[str, Any]) -> None:
    active = fams.gauge("rocelab_action_active",
                        "1 per knob an experiment action holds away from the topology's "
                        "declaration (ECN, drain, DCQCN profile, churn, STP).")
    for a in doc.get("active", []):
        active.add(fams.labels(kind=str(a["kind"]), target=str(a["target"]),
                               setting=str(a["setting"])), 1)
    for kind, n in sorted(doc.get("applied", {}).items()):
        fams.add(Kind.COUNTER, "rocelab_action_events_total",
                 "Experiment actions applied on the lab, by kind.", n, fams.labels(kind=str(kind)))
