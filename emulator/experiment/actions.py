"""Actions on an experiment's timeline: ECN off on a switch, a host that stops
draining, a DCQCN profile change, a fault, vtysh commands on a router (a BGP drain,
a policy change), and the L2 demos' own: a broadcast burst, a bystander churning
MAC tables, STP off (a loop). Each is recorded with its time.

While a run goes on, `<run dir>/actions.json` says which actions hold a knob
away from what the topology declares (ECN off on a switch, a host not
draining, another DCQCN profile, a churn running, STP off) and how many of
each kind were applied: the exporter's `rocelab_action_active` and
`rocelab_action_events_total` (docs/telemetry.md). `restore` clears what it
puts back."""

from __future__ import annotations

import contextlib
import fcntl
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from .. import bridge, faults, forwarding, frames, watchdog  # faults.apply: as `rocelab fail`
from ..congestion.maps import set_ecn
from ..congestion.pause import set_drain
from ..engine import client
from ..errors import RocelabError
from ..paths import lab_run_dir
from ..plan import Kind, Node, Plan
from ..procs import kill_pids
from ..spec import FabricMode
from ..tools import vtysh
from ..units import parse_duration, parse_size
from .action_spec import OnceSent
from .spec import Action


def apply(plan: Plan, action: Action) -> dict[str, Any]:
    """Carry out one action now; return what was done."""
    kind, args = action.kind, action.args
    if kind == "ecn":  # arguments validated and defaulted by spec.Action
        set_ecn(plan, plan.node(args["node"]), args["enabled"])
    elif kind == "drain":
        set_drain(plan, plan.node(args["host"]), args["enabled"])
    elif kind == "dcqcn":
        client.set_dcqcn(plan, plan.node(args["host"]), args["profile"])
    elif kind == "fault":
        return {"kind": kind, **faults.apply(plan, dict(args))}
    elif kind == "vtysh":
        t = time.monotonic()
        out = vtysh.run(plan, args["node"], args["commands"])
        return {"kind": kind, **args, "duration_s": round(time.monotonic() - t, 4),
                "output": out[-VTYSH_OUTPUT_CHARS:]}
    return {"kind": kind, **args}


VTYSH_OUTPUT_CHARS = 2000  # of what a vtysh action printed, kept in its event (the end)


SETTLE_COUNTERS_S = 0.2  # after a burst, before reading what it caused
WATCHDOG_GRACE_S = 2.0  # the storm's hard stop: this long after the experiment's deadline


def _uplink_tx_packets(leaf: Node) -> tuple[int, int]:
    """(uplink tx packets, VXLAN device tx packets) of a leaf."""
    counters = forwarding.port_counters(leaf)
    uplinks = sum(counters.get(p.name, {}).get("tx_packets", 0) for p in leaf.interfaces if p.fabric)
    vxlan = sum(c["tx_packets"] for name, c in counters.items() if name.startswith("vni"))
    return uplinks, vxlan


def broadcast(plan: Plan, args: dict[str, Any]) -> dict[str, Any]:
    """A burst of broadcast ARP requests from a host, and the copies its leaf sent upstream:
    0 on l3 (a router does not forward broadcasts), one per forwarding uplink on l2, one per
    remote VTEP on evpn (head-end replication: VTEPs - 1)."""
    host = plan.node(args["host"])
    leaf = plan.node(host.leaf or "")
    up0, vx0 = _uplink_tx_packets(leaf)
    t = time.monotonic()
    sent = frames.broadcast_burst(plan, host, args["frames"], args["pps"], args["size"])
    burst_s = time.monotonic() - t
    time.sleep(SETTLE_COUNTERS_S)
    up1, vx1 = _uplink_tx_packets(leaf)
    return {"host": host.name, "leaf": leaf.name, "frames": sent, "burst_s": round(burst_s, 4),
            "uplink_packets": up1 - up0, "vxlan_packets": vx1 - vx0,
            "uplink_copies_per_frame": round((up1 - up0) / sent, 3) if sent else None,
            "vxlan_copies_per_frame": round((vx1 - vx0) / sent, 3) if sent else None,
            "remote_vteps": (len(plan.of_kind(Kind.LEAF)) - 1
                             if plan.fabric is FabricMode.EVPN else None)}


ACTIONS_FILE = "actions.json"  # in the lab's run dir; read by metrics/collectors/events.py
HELD = ("ecn", "drain", "dcqcn", "churn", "stp")  # kinds that leave something in force


def held(plan: Plan, kind: str, args: dict[str, Any]) -> tuple[str, str | None]:
    """(target, setting) of an action: what it acts on, and what it leaves in force
    that the topology does not declare (None: nothing; the knob is as declared, or the
    action is over when it returns)."""
    cp = plan.congestion
    if kind == "ecn":
        on = bool(args["enabled"])
        return args["node"], None if on == (cp.ecn_on(args["node"]) if cp else True) else (
            "on" if on else "off")
    if kind == "drain":
        return args["host"], None if args["enabled"] else "off"
    if kind == "dcqcn":
        declared = cp.host_dcqcn(args["host"]) if cp else "off"
        return args["host"], None if args["profile"] == declared else str(args["profile"])
    if kind == "churn":
        return args["host"], f"{args['macs']} MACs at {args['pps']:g} frames/s"
    if kind == "stp":
        return "fabric", None if args["enabled"] or plan.fabric is not FabricMode.L2 else "off"
    if kind == "fault":
        return str(args.get("fail") or args.get("heal") or ""), None  # faults.json has them
    return str(args.get("node") or args.get("host") or ""), None


@contextlib.contextmanager
def _actions_doc(lab: str) -> Iterator[dict[str, Any]]:
    """actions.json under an exclusive lock, replaced atomically (a scrape reads it
    without the lock); a lab whose run dir is gone records nothing."""
    run_dir = lab_run_dir(lab)
    if not run_dir.is_dir():
        yield {"active": [], "applied": {}}
        return
    with open(run_dir / "actions.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = run_dir / ACTIONS_FILE
        try:
            doc = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            doc = {"active": [], "applied": {}}
        yield doc
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        tmp.replace(path)


def record(plan: Plan, kind: str, args: dict[str, Any]) -> None:
    """An action was applied: count it, and note what it holds (replacing what an
    earlier action on the same knob held)."""
    target, setting = held(plan, kind, args)
    with _actions_doc(plan.lab) as doc:
        doc["applied"][kind] = doc["applied"].get(kind, 0) + 1
        doc["active"] = [a for a in doc["active"] if (a["kind"], a["target"]) != (kind, target)]
        if setting is not None:
            doc["active"].append({"kind": kind, "target": target, "setting": setting,
                                  "time": round(time.time(), 3)})


def release(plan: Plan, knobs: set[tuple[str, str]]) -> None:
    """These (kind, target) knobs are back as declared: no longer active."""
    if knobs:
        with _actions_doc(plan.lab) as doc:
            doc["active"] = [a for a in doc["active"] if (a["kind"], a["target"]) not in knobs]


SENT_POLL_S = 0.02  # how often an action waiting on a flow's bytes (`once_sent`) looks


def await_sent(sent: Callable[[str], int], need: OnceSent, deadline: float | None,
               halt: threading.Event) -> bool:
    """Wait until flow `need.flow` has sent `need.bytes` (an action's or a flow's
    `once_sent`); True if the deadline came first (the held one then goes ahead, late).
    Returns False at once when `halt` is set."""
    target, end = parse_size(need.bytes), deadline or time.monotonic() + 60.0
    while sent(need.flow) < target:
        if time.monotonic() >= end:
            return True
        if halt.wait(SENT_POLL_S):
            return False
    return False


class Timeline(threading.Thread):
    def __init__(self, plan: Plan, actions: list[Action], t0: float,
                 deadline: float | None = None, sent: Callable[[str], int] | None = None):
        super().__init__(name="timeline", daemon=True)
        self.plan, self.t0 = plan, t0
        self.sent = sent  # a flow's bytes on the wire so far, by name (`once_sent`)
        self.deadline = deadline  # the experiment's end (monotonic): the storm's hard stop
        self.actions = sorted(actions, key=lambda a: parse_duration(a.at))
        self.events: list[dict[str, Any]] = []
        self._halt = threading.Event()
        self._churns: list[frames.MacChurn] = []
        self._watchdog: int | None = None

    def _apply(self, action: Action) -> dict[str, Any]:
        """The actions that leave something running (churn, a loop) are the timeline's."""
        kind, args = action.kind, action.args
        if kind == "churn":
            if args["flush"] and self.plan.fabric is not FabricMode.L3:
                bridge.flush_macs(self.plan)  # start from empty tables: the churn fills them
            churn = frames.MacChurn(self.plan.node(args["host"]), args["macs"], args["pps"])
            churn.start()
            self._churns.append(churn)
            return {"kind": kind, **args}
        if kind == "stp":
            if self.plan.fabric is not FabricMode.L2:  # side by side with l2: nothing to loop
                return {"kind": kind, **args, "skipped": f"fabric {self.plan.fabric.value} runs "
                        "no spanning tree (routed links: a loop is cut by TTL, not STP)"}
            if not args["enabled"] and self._watchdog is None:
                left = (self.deadline or time.monotonic() + 60.0) - time.monotonic()
                self._watchdog = watchdog.start(self.plan, max(0.0, left) + WATCHDOG_GRACE_S)
            bridge.set_stp(self.plan, args["enabled"])
            if args["enabled"] and self._watchdog is not None:  # the loop is closed: stand down
                kill_pids([self._watchdog], self.plan.lab)
                self._watchdog = None
            return {"kind": kind, **args}
        if kind == "broadcast":
            return {"kind": kind, **broadcast(self.plan, args)}
        return apply(self.plan, action)

    def run(self) -> None:
        for action in self.actions:
            wait = self.t0 + parse_duration(action.at) - time.monotonic()
            if self._halt.wait(max(0.0, wait)):
                return
            late = self._await_sent(action)
            if self._halt.is_set():
                return
            try:
                done = self._apply(action)
            except (RocelabError, OSError, KeyError) as e:
                done = {"kind": action.kind, "error": str(e)}
            else:
                with contextlib.suppress(OSError, KeyError, TypeError):  # telemetry: never fatal
                    record(self.plan, action.kind, action.args)
            self.events.append({"t_s": round(time.monotonic() - self.t0, 4), **done,
                                **({"late": True} if late else {})})

    def _await_sent(self, action: Action) -> bool:
        """Hold `action` until its `once_sent` flow has sent that much; True if the
        experiment's deadline came first (it then runs anyway, late)."""
        if action.once_sent is None or self.sent is None:
            return False
        return await_sent(self.sent, action.once_sent, self.deadline, self._halt)

    def finish(self, deadline: float) -> None:
        """Let the remaining actions run (a heal must not be skipped), up to `deadline`."""
        self.join(max(0.0, deadline - time.monotonic()))
        self._halt.set()
        self.join()

    def restore(self) -> None:
        """Stop what actions left running (churn; STP off: back on, its watchdog stopped) and
        put every congestion knob an action touched back as the topology configures it,
        so a kept lab runs the next experiment as declared."""
        try:
            self._restore()
        finally:
            with contextlib.suppress(OSError, KeyError, TypeError):
                release(self.plan, {(a.kind, held(self.plan, a.kind, a.args)[0])
                                    for a in self.actions if a.kind in HELD})

    def _restore(self) -> None:
        for churn in self._churns:
            churn.stop()
        if self._watchdog is not None:
            bridge.set_stp(self.plan, bool(self.plan.l2 and self.plan.l2.stp))
            kill_pids([self._watchdog], self.plan.lab)
            self._watchdog = None
        cp = self.plan.congestion
        if cp is None:
            return
        for a in self.actions:
            args = a.args
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
