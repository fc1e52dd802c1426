"""Recovery: what each router's FIB should become after a fault event, and when it did.

A `FibWatcher` follows every router's kernel FIB from the moment it starts:
one netlink socket per router namespace subscribed to IPv4 route changes is
the doorbell, and each ring re-reads that router's ECMP widths toward the
host prefixes (`converge.fib_widths_of`), stamped with the monotonic clock
(the clock of fault events). No polling interval limits the resolution.

`expected_fib` says, purely from the plan and the links a fault cut, what
the widths must become (eBGP in a Clos is valley-free: spines share an ASN,
so a leaf reaches a remote leaf only through a spine that still has links
to both). `settle` waits, for `fail`, `heal`, the impact scenarios and the experiment
runner alike, until routing reflects an event; `convergence` finds, in the
samples, when the FIB first changed after an event and when it settled on
the expected state for good.
"""

from __future__ import annotations

import errno
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from .. import bridge, converge, netns
from ..errors import ConvergeTimeout
from ..plan import Kind, Plan
from . import inject
from .model import AfterState, Convergence, Fault, FaultEvent, HealEvent, links_of

RTMGRP_LINK = 0x1  # a port going down flushes routes without any route notification
RTMGRP_IPV4_ROUTE = 0x40
RESAMPLE_S = 0.5  # re-read every FIB this often anyway: a lost netlink message cannot hide a change
# router -> host prefix -> next hops (0 = no route); on l2: switch -> port -> STP state, and
# "mac <host MAC>" -> the port that MAC was learned on (converge.bridge_forwarding)
Widths = dict[str, dict[str, Any]]
Sample = tuple[float, str, dict[str, Any]]
Progress = Callable[[str], None]
Event = Mapping[str, Any]  # a fail or heal (FaultEvent, HealEvent), or its row in a run's events


def expected_fib(plan: Plan, after: AfterState) -> Widths:
    """The widths every surviving router converges to once the event's cuts are routed around
    (toward each host prefix on l3, each leaf's VTEP loopback on evpn; nothing on l2)."""
    cut = frozenset(frozenset(link) for link in after.get("cut_links", []))
    return plan.expected_widths(cut, frozenset(after.get("failed_nodes", [])))


def expected_forwarding(plan: Plan, after: AfterState) -> Widths:
    """What the watcher waits for: the FIB widths on a routed fabric (expected_fib); on l2,
    every live switch port's STP state in the tree 802.1D settles on around the cuts (the
    cut ports themselves are left out: down, or -- silent -- forwarding with no BPDUs), and
    for each host the port toward it along that tree (`mismatched` says how it is read)."""
    if plan.routed:
        return expected_fib(plan, after)
    cut = frozenset(frozenset(link) for link in after.get("cut_links", []))
    tree = plan.stp_tree(cut, frozenset(after.get("failed_nodes", [])))
    macs = _tree_macs(plan, tree)
    return {sw: {port: st for port, st in ports.items() if st != "disabled"} | macs[sw]
            for sw, ports in tree.items()}


def _tree_macs(plan: Plan, tree: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Switch -> "mac <host MAC>" -> the port toward that host along `tree` (links forwarding
    at both ends), on the switches that carry frames to it: those with another host behind
    them. One with none (spine2 on the planned l2 tree: only its link to leaf1 forwards)
    sees that host's frames only as flood copies, and the copy the tree carries reaches the
    host, so a stale entry there loses nothing. Hosts with more than one NIC are left out."""
    out: dict[str, dict[str, str]] = {sw: {} for sw in tree}
    for host in plan.hosts:
        nic = host.interfaces[0]
        if len(host.interfaces) == 1 and _forwards(tree, nic.peer, nic.peer_ifname):
            for sw, port in _toward(plan, tree, host.name, nic.peer, nic.peer_ifname).items():
                out[sw][converge.MAC_KEY + nic.mac] = port
    return out


def _forwards(tree: dict[str, dict[str, str]], node: str, port: str) -> bool:
    return tree.get(node, {}).get(port) == "forwarding"


def _toward(plan: Plan, tree: dict[str, dict[str, str]], host: str, leaf: str,
            port: str) -> dict[str, str]:
    """Switch -> its port toward `host` (on `leaf`'s `port`), for the switches with another
    host behind them on the tree."""
    toward, order = {leaf: port}, [leaf]
    for sw in order:  # breadth first from the host's leaf; `order` grows as it goes
        for p in plan.node(sw).interfaces:
            if p.fabric and p.peer not in toward and _forwards(tree, sw, p.name) \
                    and _forwards(tree, p.peer, p.peer_ifname):
                toward[p.peer] = p.peer_ifname
                order.append(p.peer)
    behind = {sw: any(not p.fabric and p.peer != host and _forwards(tree, sw, p.name)
                      for p in plan.node(sw).interfaces) for sw in order}
    for sw in reversed(order):  # a switch's hosts are behind every switch nearer the host
        if behind[sw] and sw != leaf:
            behind[plan.node(sw).interface(toward[sw]).peer] = True
    return {sw: p for sw, p in toward.items() if behind[sw]}


def mismatched(have: dict[str, Any], want: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Where one router's or switch's forwarding state differs from `want` (an entry of
    `expected_forwarding`): key -> (have, want); {} is settled. The one definition `fail`
    and `heal` wait for and `status` calls converged: every expected ECMP width or STP port
    state holds, and every host MAC the target lists for a switch (`_tree_macs`) that it
    has learned points along the tree (one it has not learned is flooded, which reaches
    the host; one learned before the tree moved sends the host's frames where they are
    dropped until it ages out). Pure."""
    return {k: (have.get(k), w) for k, w in want.items()
            if have.get(k) != w and not (k.startswith(converge.MAC_KEY) and k not in have)}


def _matches(state: Widths, expected: Widths) -> bool:
    """Every router or switch settled (`mismatched`), and each one read at least once."""
    return all(not mismatched(state.get(r, {}), want) for r, want in expected.items()) \
        and all(r in state for r in expected)


class FibWatcher:
    """Samples of every router's FIB widths from start() to stop(); usable with `with`."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.samples: list[Sample] = []
        self.current: Widths = {}
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._socks: dict[socket.socket, str] = {}
        self._thread = threading.Thread(target=self._run, name="fib-watcher", daemon=True)

    def __enter__(self) -> FibWatcher:
        for node in self.plan.routers:  # subscribe first, then read: no change slips between
            with netns.entered(node.netns):
                s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK,
                                  socket.NETLINK_ROUTE)
            s.bind((0, RTMGRP_LINK | RTMGRP_IPV4_ROUTE))
            self._socks[s] = node.name
        for name in self._socks.values():
            self._sample(name)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for s in self._socks:
            s.close()

    def _sample(self, router: str) -> None:
        t = time.monotonic()
        node = self.plan.node(router)
        widths = (converge.fib_widths_of(self.plan, node) if self.plan.routed
                  else converge.bridge_forwarding_of(self.plan, node))
        with self._changed:
            if widths != self.current.get(router):
                self.samples.append((t, router, widths))
                self.current[router] = widths
                self._changed.notify_all()

    def _run(self) -> None:
        next_full = time.monotonic() + RESAMPLE_S
        while not self._stop.is_set():
            ready, _, _ = select.select(list(self._socks), [], [], 0.1)
            for s in ready:
                _drain(s)
                self._sample(self._socks[s])
            if time.monotonic() >= next_full:
                for name in self._socks.values():
                    self._sample(name)
                next_full = time.monotonic() + RESAMPLE_S

    def wait_quiet(self, since: float, quiet_s: float, timeout_s: float) -> None:
        """Block until no router's FIB has changed for `quiet_s` (counting from `since`):
        the target on a lab running the user's own FRR policy, whose widths the plan
        cannot predict."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                last = max([since] + [t for t, _, _ in self.samples])
                if time.monotonic() - last >= quiet_s:
                    return
                if time.monotonic() > deadline:
                    raise ConvergeTimeout(f"lab {self.plan.lab}: the FIB kept changing for "
                                          f"{timeout_s:.0f} s")
                self._changed.wait(0.05)

    def wait_for(self, expected: Widths, timeout_s: float) -> None:
        """Block until the FIB matches `expected` (`convergence` says when it did)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not _matches(self.current, expected):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ConvergeTimeout(_mismatch(self.plan.lab, self.current, expected, timeout_s))
                self._changed.wait(min(left, 0.1))


def settle(plan: Plan, watch: FibWatcher, event: Event, timeout_s: float,
           progress: Progress = lambda _: None) -> None:
    """Block until routing reflects `event` (a fail or heal from inject.py); ConvergeTimeout if not
    within `timeout_s`. `convergence(watch.samples, event, ...)` then says when it did.

    After healing a silent fault this first waits until BGP on both ends of each healed link
    has heard its peer (the hold timer still runs from the last keepalive read before the
    fault, so a FIB that looks whole could break again); then until every router's FIB holds
    what the plan and the faults still active require.
    """
    deadline = time.monotonic() + timeout_s
    progress(f"waiting for routing to converge after {event['action']} "
             f"{event.get('name', event.get('target'))}")
    if event["action"] == "heal":
        silent = [Fault.from_json(r) for r in event["healed"] if r.get("silent")]
        converge.wait_heard(plan, [link for f in silent for link in links_of(plan, f)],
                            event["monotonic"], timeout_s)
    if converge.user_config(plan):
        watch.wait_quiet(event["monotonic"], converge.USER_STABLE_S,
                         max(0.0, deadline - time.monotonic()))
        return
    target = expected_forwarding(plan, event["after"])
    if not plan.routed:  # l2: the tree first, then the MAC tables it left behind
        watch.wait_for(_ports_only(target), max(0.0, deadline - time.monotonic()))
        _forget_stale(plan, watch.current, target)
    watch.wait_for(target, max(0.0, deadline - time.monotonic()))


def _ports_only(target: Widths) -> Widths:
    return {sw: {k: v for k, v in want.items() if not k.startswith(converge.MAC_KEY)}
            for sw, want in target.items()}


def _forget_stale(plan: Plan, current: Widths, target: Widths) -> None:
    """Delete the host MACs the switches learned off the settled tree: what 802.1D's
    topology change (short ageing) is for, and what the kernel's leaves undone when the
    change ended before the entry aged (measured: an entry on a blocked port outlived a
    heal by 30 s; the default ageing is 300 s)."""
    stale = {sw: [(k[len(converge.MAC_KEY):], have) for k, (have, _) in
                  mismatched(current.get(sw, {}), want).items()
                  if k.startswith(converge.MAC_KEY) and have is not None]
             for sw, want in target.items()}
    netns.parallel(lambda sw: bridge.forget_macs(plan.node(sw), stale[sw]),
                   [sw for sw, entries in stale.items() if entries])


def fail_settled(plan: Plan, fault: Fault, timeout_s: float,
                 progress: Progress = lambda _: None) -> FaultEvent:
    """Inject `fault`, wait until routing went around it; the event with its convergence."""
    with FibWatcher(plan) as watch:
        event = inject.fail(plan, fault)
        settle(plan, watch, event, timeout_s, progress)
        event["convergence"] = convergence(watch.samples, event, plan)
    return event


def heal_settled(plan: Plan, target: Fault | None, timeout_s: float,
                 progress: Progress = lambda _: None) -> HealEvent:
    """Heal `target` (None: every fault), wait until routing is whole again; the event with
    its convergence."""
    with FibWatcher(plan) as watch:
        event = inject.heal(plan, target)
        settle(plan, watch, event, timeout_s, progress)
        event["convergence"] = convergence(watch.samples, event, plan)
    return event


def _drain(s: socket.socket) -> None:
    """Read every pending notification; their content does not matter, only that they came."""
    while True:
        try:
            s.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError as e:
            if e.errno != errno.ENOBUFS:  # overflow: messages lost, the re-read covers it
                raise


def _mismatch(lab: str, state: Widths, expected: Widths, timeout_s: float) -> str:
    bad = []
    for router, want in expected.items():
        diff = {p: f"{h} (want {w})" for p, (h, w) in mismatched(state.get(router, {}), want).items()}
        if diff:
            p, d = next(iter(diff.items()))
            bad.append(f"{router}: {len(diff)} entries differ, e.g. {p}: {d}")
    return (f"lab {lab}: forwarding (FIB, or STP port states on l2) did not reach the "
            f"expected state within {timeout_s:.0f} s: "
            + "; ".join(bad[:3]))


def convergence(samples: list[Sample], event: Event, plan: Plan,
                until: float | None = None) -> Convergence:
    """When, after `event`, the FIB first changed and when it settled on the expected state.

    detect_s: first FIB change on any router (None if none); converge_s: the
    last change after which every surviving router held the expected widths
    (0.0 if they already did; None if never, within `until`).
    """
    t0 = event["monotonic"]
    user = converge.user_config(plan)  # the user's policy: settled = the last change
    expected = expected_forwarding(plan, event["after"])
    state: Widths = {}
    for t, r, w in samples:
        if t <= t0:
            state[r] = w
    settled = t0 if user or _matches(state, expected) else None
    first, changed = None, set()
    for t, r, w in samples:
        if t <= t0 or (until is not None and t > until):
            continue
        first = first if first is not None else t
        changed.add(r)
        state[r] = w
        if user:
            settled = t
            continue
        ok = _matches(state, expected)
        settled = (settled or t) if ok else None
    return {"event": event.get("name", event.get("target")), "action": event["action"],
            "detect_s": None if first is None else round(first - t0, 4),
            "converge_s": None if settled is None else round(settled - t0, 4),
            "settled": settled is not None, "routers_changed": sorted(changed),
            "leaf_ecmp": _leaf_ecmp(plan, state)}


def _leaf_ecmp(plan: Plan, state: Widths) -> dict[str, list[int]]:
    """Leaf -> [min, max] width toward remote hosts, as last seen ({} on l2: no FIB)."""
    out: dict[str, list[int]] = {}
    if not plan.routed:
        return out
    for leaf in plan.of_kind(Kind.LEAF):
        widths = list(state.get(leaf.name, {}).values()) or [0]
        out[leaf.name] = [min(widths), max(widths)]
    return out
