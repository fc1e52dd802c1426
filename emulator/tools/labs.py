"""Every lab on this machine, for `rocelab list`: what it is, how old, and one cheap health word.

The labs are found the way `down` finds them (state.known_labs: tagged
namespaces, tagged processes, run dirs), so a lab that lost its state file
is listed too. The health word costs one netlink route dump per router and
no vtysh, no pings (`rocelab status` is the thorough check):

    healthy        no fault in force and every router's kernel FIB holds the full ECMP
                   widths the plan requires (`status` also pings every host pair)
    converged      faults recorded by `rocelab fail` are in force and every surviving
                   router's FIB already holds what they leave (routed around them)
    not-converged  some router's FIB differs from that (still converging, or a fault
                   `rocelab fail` did not record: `rocelab status` finds those)
    starting       the state file says `up` has not finished (or died: `rocelab down`)
    broken         traces without a state file, namespaces or FRR daemons missing
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, TypedDict

from .. import faults, netns, procs, state
from ..converge import bridge_forwarding_of, fib_widths_of, unrouted, user_config
from ..errors import RocelabError
from ..paths import lab_run_dir
from ..plan import Plan

HEALTH = ("healthy", "converged", "not-converged", "starting", "broken")  # `status`'s words


class LabRow(TypedDict):
    """One lab as `list --json` prints it; the keys are stable."""

    name: str
    topology: str | None  # the file `up` was given (absolute), None without a state file
    routers: int | None  # None when the plan is unknown (no state file)
    hosts: int | None
    namespaces: int  # found in the kernel, tagged with the lab
    processes: int  # tagged processes: FRR daemons, engines, controllers...
    faults: int  # recorded by `rocelab fail` and not healed
    created: float | None  # Unix time
    age_s: float | None
    health: str  # one of HEALTH
    detail: str | None  # why, when not converged


def format_age(seconds: float | None) -> str:
    """42s, 5m07s, 3h04m, 2d05h; '?' when unknown."""
    if seconds is None:
        return "?"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def created_at(record: dict[str, Any] | None, run_dir: Path) -> float | None:
    """When the lab was created: the state file's `created` if it has one, else the oldest
    mtime in its run dir (configs written once at `up`; state.json itself is rewritten)."""
    if record and isinstance(record.get("created"), (int, float)):
        return float(record["created"])
    times = []
    try:
        times.append(run_dir.stat().st_mtime)
        for p in run_dir.iterdir():
            times.append(p.stat().st_mtime)
            if p.is_dir():
                times += [q.stat().st_mtime for q in p.iterdir()]
    except OSError:  # no run dir, or a file vanished while we looked
        pass
    return min(times) if times else None


def fib_problems(widths: dict[str, dict[str, Any]], expected: dict[str, dict[str, Any]],
                 bridged: bool = False) -> list[str]:
    """Routers whose FIB (switches whose forwarding, `bridged`: faults.mismatched, what
    `status` and `heal` use) differ from what is expected, one line each (pure)."""
    out = []
    for router, want in expected.items():
        have = widths.get(router, {})
        bad = ({p: h for p, (h, _) in faults.mismatched(have, want).items()} if bridged else
               {p: have.get(p, 0) for p, w in want.items() if have.get(p, 0) != w})
        if bad:
            p, w = next(iter(bad.items()))
            what = ("ports not in the planned STP state" if bridged
                    else "host prefixes not at the expected ECMP width")
            out.append(f"{router}: {len(bad)} {what} (e.g. {p}: {w}, want {want[p]})")
    return out


def health_of(lab: str, *, has_state: bool, status: str | None, missing_namespaces: list[str],
              dead_daemons: list[str], fib: list[str], faults_in_force: int) -> tuple[str, str | None]:
    """The health word and why (pure): the first of broken, starting, not-converged,
    converged, healthy that applies."""
    if not has_state:
        return "broken", f"no state file (crashed?): `rocelab down {lab}` removes what is left"
    if status != "up":
        return "starting", (f"state file says {status!r}: `up` is still running, or it died "
                            f"(`rocelab down {lab}`)")
    if missing_namespaces:
        return "broken", (f"{len(missing_namespaces)} namespaces missing "
                          f"(e.g. {missing_namespaces[0]})")
    if dead_daemons:
        return "broken", f"{len(dead_daemons)} FRR daemons not running (e.g. {dead_daemons[0]})"
    if fib:
        more = f" (+{len(fib) - 1} more routers)" if len(fib) > 1 else ""
        return "not-converged", fib[0] + more
    if faults_in_force:
        return "converged", f"{faults_in_force} fault(s) in force, routed around"
    return "healthy", None


def _recorded_faults(lab: str) -> list[faults.Fault]:
    """The active faults `rocelab fail` recorded (faults.json), read without taking its lock;
    a record that does not parse is left out."""
    try:
        doc = json.loads((lab_run_dir(lab) / "faults.json").read_text())
    except (OSError, json.JSONDecodeError):
        return []
    found = []
    for r in doc.get("active", []) if isinstance(doc, dict) else []:
        try:
            found.append(faults.Fault.from_json(r))
        except (KeyError, TypeError, ValueError):
            continue
    return found


def _fib(plan: Plan, recorded: list[faults.Fault]) -> list[str]:
    """Routers whose kernel FIB (on l2: switches whose bridge port states) is not what the
    plan and the recorded faults require -- the same target `status` and `fail` use."""
    expected = faults.expected_forwarding(plan, faults.after_state(plan, recorded))
    routers = [plan.node(r) for r in expected]
    read = fib_widths_of if plan.routed else bridge_forwarding_of
    pairs = netns.parallel(lambda n: (n.name, read(plan, n)), routers)
    widths: dict[str, dict[str, Any]] = dict(pairs)
    if user_config(plan):  # the user's policy decides the widths: only a router routing none
        return unrouted(widths)
    return fib_problems(widths, expected, bridged=not plan.routed)


def lab_row(lab: str, namespaces: set[str], pids: set[int], now: float) -> LabRow:
    """One lab, given the namespaces and processes found carrying its tag."""
    record = state.read(lab)
    created = created_at(record, lab_run_dir(lab))
    row: LabRow = {"name": lab, "topology": (record or {}).get("topology"), "routers": None,
                   "hosts": None, "namespaces": len(namespaces), "processes": len(pids),
                   "faults": 0, "created": created,
                   "age_s": None if created is None else round(max(0.0, now - created), 1),
                   "health": "broken", "detail": None}
    if record is None:
        row["health"], row["detail"] = health_of(lab, has_state=False, status=None, missing_namespaces=[],
                                                 dead_daemons=[], fib=[], faults_in_force=0)
        return row
    try:
        plan = state.lab_plan(lab)
    except RocelabError as e:
        row["detail"] = f"state file unusable: {e}"
        return row
    row["routers"], row["hosts"] = len(plan.routers), len(plan.hosts)
    status = record.get("status")
    missing = [n.netns for n in plan.nodes if n.netns not in namespaces]
    dead = [f"{d.get('name')} on {d.get('node')} (pid {d.get('pid')})"
            for d in record.get("daemons", []) if d.get("pid") not in pids]
    recorded = _recorded_faults(lab)
    row["faults"] = len(recorded)
    fib = _fib(plan, recorded) if status == "up" and not missing and not dead else []
    row["health"], row["detail"] = health_of(lab, has_state=True, status=status, missing_namespaces=missing,
                                             dead_daemons=dead, fib=fib, faults_in_force=len(recorded))
    return row


def list_labs() -> list[LabRow]:
    """Every lab with any trace on this machine, by name."""
    ns_by_lab: dict[str, set[str]] = {}
    for ns, lab in state.tagged_namespaces().items():
        ns_by_lab.setdefault(lab, set()).add(ns)
    pids_by_lab: dict[str, set[int]] = {}
    for pid, lab in procs.tagged_processes().items():
        if pid != os.getpid():
            pids_by_lab.setdefault(lab, set()).add(pid)
    labs = set(ns_by_lab) | set(pids_by_lab) | state.run_dir_labs()
    now = time.time()
    return [lab_row(lab, ns_by_lab.get(lab, set()), pids_by_lab.get(lab, set()), now)
            for lab in sorted(labs)]
