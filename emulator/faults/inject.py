"""Inject and heal faults, recorded in `<run dir>/faults.json`; the kernel is the truth.

Every fail and heal is an event (see `FaultEvent`) with a wall-clock and a
monotonic timestamp, appended to faults.json together with the faults still
active. `active()` keeps only records whose effects are in force and reports
effects no record explains (a crash, a manual `ip link set down`) as
unrecorded faults, so `heal --all` always restores the lab.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

from ..paths import lab_run_dir
from ..plan import Plan
from ..units import UnitError, parse_duration
from . import effects as fx
from .model import (
    Effect,
    EffectKind,
    Fault,
    FaultError,
    FaultEvent,
    FaultKind,
    FlapEvent,
    HealEvent,
    Stamp,
    after_state,
    effects_of,
    gray_args,
    link_fault,
    node_fault,
    plane_fault,
    real_rate,
)

# -- records ---------------------------------------------------------------

def _load(lab: str) -> dict[str, Any]:
    try:
        return json.loads((lab_run_dir(lab) / "faults.json").read_text())
    except FileNotFoundError:
        return {"active": [], "events": []}


@contextlib.contextmanager
def _records(lab: str) -> Iterator[dict[str, Any]]:
    """faults.json under an exclusive lock; written back when the body succeeds."""
    run_dir = lab_run_dir(lab)
    with open(run_dir / "faults.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = run_dir / "faults.json"
        doc = _load(lab)
        yield doc
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        tmp.replace(path)


def _live(plan: Plan, doc: dict[str, Any], present: set[Effect]) -> list[dict[str, Any]]:
    """Recorded faults still in force, plus faults derived from unexplained effects."""
    live = [r for r in doc["active"] if effects_of(plan, Fault.from_json(r)) <= present]
    explained = set().union(*(effects_of(plan, Fault.from_json(r)) for r in live))
    return live + [f.to_json() | {"recorded": False, "time": None}
                   for f in _derive(plan, present - explained)]


def _derive(plan: Plan, left: set[Effect]) -> list[Fault]:
    """Name the faults behind effects no record explains: whole nodes first, then links."""
    found = []
    for silent in (False, True):
        for node in plan.routers:
            f = Fault(FaultKind.NODE, node.name, silent=silent)
            if effects_of(plan, f) <= left:
                found.append(f)
                left -= effects_of(plan, f)
    for e in sorted(left):
        peer = next(i.peer for i in plan.node(e.node).interfaces if i.name == e.port)
        shares = {EffectKind.LOSS: "loss", EffectKind.CORRUPT: "corrupt"}
        gray = gray_args(rate=None, **{k: e.value if e.kind is kind else None
                                       for kind, k in shares.items()})
        if e.kind is EffectKind.RATE:  # the kernel's (wall) bit/s, back in the fault's units
            gray["rate_bps"] = real_rate(plan, int(e.value))
        f = link_fault(plan, e.node, peer, silent=e.kind is EffectKind.DROP, **gray)
        if not any(f.same_target(g) for g in found):
            found.append(f)
    return found


def active(plan: Plan) -> list[dict[str, Any]]:
    """Faults in force: records (with `since`) and unrecorded ones found in the kernel."""
    counters = fx.scan(plan)
    live = _live(plan, _load(plan.lab), set(counters))
    for r in live:
        f = Fault.from_json(r)
        r["name"] = f.name
        r["dropped_packets"] = sum(counters.get(e, 0) for e in effects_of(plan, f))
    return live


def _stamp() -> Stamp:
    t = time.time()
    return {"time": round(t, 6), "iso": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))
            + f".{int(t % 1 * 1000):03d}Z", "monotonic": round(time.monotonic(), 6)}


def fail(plan: Plan, fault: Fault) -> FaultEvent:
    """Inject a fault; return its event (timestamps, effects, what routing should become)."""
    with _records(plan.lab) as doc:
        live = _live(plan, doc, set(fx.scan(plan)))
        clash = next((r for r in live if Fault.from_json(r).same_target(fault)), None)
        if clash:
            raise FaultError(f"{fault.name} has already failed; heal it first")
        stamp = _stamp()
        fx.apply(plan, effects_of(plan, fault))
        inject_s = round(time.monotonic() - stamp["monotonic"], 6)
        record = fault.to_json() | stamp
        doc["active"] = [r for r in live if r.get("recorded", True)] + [record]
        faults = [Fault.from_json(r) for r in live] + [fault]
        # (record: the fault's JSON keys, Fault.to_json, untyped)
        event: FaultEvent = {"action": "fail", **record, "name": fault.name,  # type: ignore[typeddict-item]
                 "inject_s": inject_s,
                 "effects": sorted(map(str, effects_of(plan, fault))),
                 "after": after_state(plan, faults)}
        doc["events"].append(event)
    return event


def heal(plan: Plan, target: Fault | None = None) -> HealEvent:
    """Heal one fault (matched by link ends or node; None: every fault, recorded or not)."""
    with _records(plan.lab) as doc:
        present = set(fx.scan(plan))
        live = _live(plan, doc, present)
        healed = [r for r in live if target is None or Fault.from_json(r).same_target(target)]
        if target is not None and not healed:
            raise FaultError(f"{target.name} is not failed; active: "
                             + (", ".join(Fault.from_json(r).name for r in live) or "none"))
        kept = [Fault.from_json(r) for r in live if r not in healed]
        keep = set().union(*(effects_of(plan, f) for f in kept))
        lift = present if target is None else set().union(
            *(effects_of(plan, Fault.from_json(r)) for r in healed)) - keep
        stamp = _stamp()
        fx.undo(plan, lift, present)
        event: HealEvent = {"action": "heal", "target": target.name if target else "all", **stamp,
                 "inject_s": round(time.monotonic() - stamp["monotonic"], 6),
                 "healed": healed, "effects": sorted(map(str, lift & present)),
                 "after": after_state(plan, kept)}
        doc["active"] = [r for r in live if r not in healed and r.get("recorded", True)]
        doc["events"].append(event)
    return event


def events(lab: str) -> list[dict[str, Any]]:
    """Every fail and heal recorded for the lab so far."""
    return _load(lab)["events"]


def flap(plan: Plan, fault: Fault, period_s: float, count: int,
         stop: threading.Event | None = None) -> FlapEvent:
    """Fail and heal `fault` `count` times: down for the first half of each period.

    Blocks for about count x period; setting `stop` ends it early. The link is
    always healed on return, even on an exception.
    """
    if period_s <= 0 or count < 1:
        raise FaultError(f"flap: period must be > 0 and count >= 1 (got {period_s}, {count})")
    stop = stop or threading.Event()
    transitions: list[FaultEvent | HealEvent] = []
    t0 = time.monotonic()
    try:
        for i in range(count):
            transitions.append(fail(plan, fault))
            if stop.wait(max(0.0, t0 + (i + 0.5) * period_s - time.monotonic())):
                break
            transitions.append(heal(plan, fault))
            if i + 1 < count and stop.wait(max(0.0, t0 + (i + 1) * period_s - time.monotonic())):
                break
    finally:
        if transitions and transitions[-1]["action"] == "fail":
            transitions.append(heal(plan, fault))
    first = transitions[0]
    # (Fault.to_json: the fault's JSON keys, untyped)
    return {"action": "flap", **fault.to_json(), "name": f"flap {fault.a}-{fault.b}",  # type: ignore[typeddict-item]
            "period_s": period_s, "count": count, "time": first["time"], "iso": first["iso"],
            "monotonic": first["monotonic"], "cycles": sum(1 for t in transitions if t["action"] == "fail"),
            "transitions": transitions}


_FAIL_KEYS = {"link": {"a", "b", "silent", "loss", "corrupt", "rate"}, "node": {"node", "silent"},
              "plane": {"plane", "silent"},
              "flap": {"a", "b", "silent", "period", "period_s", "count"}}
_HEAL_KEYS = {"link": {"a", "b", "silent"}, "node": {"node", "silent"},
              "plane": {"plane", "silent"}, "all": set()}


def parse_action(plan: Plan, action: dict[str, Any]) -> tuple[str, str, Fault | None]:
    """An experiment's fault action -> (verb, what, fault); FaultError naming what is wrong.
    The runner calls it for every action before anything exists, `apply` again at its time."""
    verbs = [v for v in ("fail", "heal") if v in action]
    if len(verbs) != 1:
        raise FaultError(f"a fault action has exactly one of `fail` or `heal` (got {action!r})")
    verb = verbs[0]
    table = _FAIL_KEYS if verb == "fail" else _HEAL_KEYS
    what = action[verb]
    if what not in table:
        raise FaultError(f"{verb}: {what!r} is not one of {', '.join(table)}")
    extra = set(action) - table[what] - {verb}
    if extra:
        raise FaultError(f"{verb} {what}: unknown keys {sorted(extra)}; "
                         f"allowed: {sorted(table[what])}")
    silent = bool(action.get("silent", False))
    try:
        if what == "all":
            return verb, what, None
        if what == "node":
            return verb, what, node_fault(plan, action["node"], silent)
        if what == "plane":
            return verb, what, plane_fault(plan, action["plane"], silent)
        gray = gray_args(action.get("loss"), action.get("corrupt"), action.get("rate"))
        return verb, what, link_fault(plan, action["a"], action["b"], silent, **gray)
    except KeyError as e:
        raise FaultError(f"{verb} {what}: missing key {e}") from None


def apply(plan: Plan, action: dict[str, Any]) -> FaultEvent | HealEvent | FlapEvent:
    """Run one action of an experiment file; return its recorded event.

    {"fail": "link", "a": "leaf1", "b": "spine2", "silent": false}
    {"fail": "link", "a": "leaf1", "b": "spine2", "loss": "1%"}        (gray: also corrupt, rate)
    {"fail": "node", "node": "spine2", "silent": false}
    {"fail": "plane", "plane": 1, "silent": false}    (every spine of plane 1; planes > 1)
    {"fail": "flap", "a": "leaf1", "b": "spine1", "period": "2s", "count": 5}   (blocks)
    {"heal": "link", "a": "leaf1", "b": "spine2"} | {"heal": "node", "node": "spine2"}
    {"heal": "plane", "plane": 1}
    {"heal": "all"}
    """
    verb, what, target = parse_action(plan, action)
    if verb == "heal":
        return heal(plan, target)
    if what == "flap":
        try:
            period = parse_duration(action.get("period_s", action.get("period", 2.0)), "flap period")
        except UnitError as e:
            raise FaultError(str(e)) from None
        return flap(plan, target, period, int(action.get("count", 1)))  # type: ignore[arg-type]
    return fail(plan, target)  # type: ignore[arg-type]
