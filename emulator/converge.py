"""Is the fabric converged? Named checks over observable state, polled to a deadline.

The checks, cheapest first:
  fib      every leaf's kernel FIB holds every remote host prefix (evpn: every
           other leaf's VTEP loopback) with one next hop per spine (ECMP), and
           every spine holds every one of them;
  bgp      every configured BGP session is Established (vtysh JSON);
  evpn     (fabric evpn) every leaf's VNI lists every other leaf as a remote VTEP;
  stp      (fabric l2, instead of all three) the planned root bridge won, exactly
           the planned ports block and every other port forwards;
  reach    every host answers ICMP echo from every other host.
`wait()` never sleeps a fixed time to "let things settle": it polls, and on
timeout says which check failed where.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any, TypedDict

from . import bridge, evpn, netns, rtnl, waiting
from .errors import ConvergeTimeout, RocelabError
from .frr import vtysh_json
from .plan import Kind, Node, Plan
from .polled import CheckResult, Watch
from .reach import Answered, probe_pairs, unreachable_pairs
from .spec import FabricMode

POLL_S = 0.05
Progress = Callable[[str], None]


def route_widths(node: Node) -> dict[str, int]:
    """IPv4 unicast routes of the main table in a node's namespace: prefix -> next-hop count."""
    with netns.entered(node.netns):
        return rtnl.route_widths(socket.AF_INET)


def fib_widths_of(plan: Plan, node: Node) -> dict[str, int]:
    """A router's width toward each host prefix it must learn through BGP (0 = missing)."""
    if not netns.exists(node.netns):
        return {}
    have = route_widths(node)
    return {p: have.get(p, 0) for p in plan.fib_prefixes(node)}


def fib_widths(plan: Plan) -> dict[str, dict[str, int]]:
    widths = netns.parallel(lambda n: (n.name, fib_widths_of(plan, n)), plan.frr_nodes)
    return dict(widths)


def expected_width(plan: Plan, node: Node) -> int:
    """The widest ECMP a healthy fabric gives `node` toward any prefix (a 2-tier leaf: its
    spines; the exact width per prefix is Plan.expected_widths)."""
    return max(plan.expected_widths().get(node.name, {}).values(), default=0)


def check_fib(plan: Plan) -> CheckResult:
    """Every router's width toward every prefix is what BGP computes over the plan's graph
    (a leaf of a 2-tier Clos: one next hop per spine; a spine: one)."""
    if user_config(plan):
        return check_fib_user(plan)
    problems, missing = [], 0
    expected = plan.expected_widths()
    read = fib_widths(plan)
    for name, widths in read.items():
        bad = {p: (w, expected[name][p]) for p, w in widths.items() if w != expected[name][p]}
        if bad:
            p, (w, want) = next(iter(bad.items()))
            missing += len(bad)
            problems.append(f"{name}: {len(bad)} prefixes not at the expected width "
                            f"(e.g. {p}: {w} next hop{'s' if w != 1 else ''}, want {want})")
    return CheckResult("fib", not problems, problems, len(read) - len(problems), len(read), missing)


# -- labs running the user's own FRR configuration (overrides: frr, frr_configs:) ------------
# The plan cannot know what widths a user's policy leaves (a route-map that stops a leaf
# announcing its hosts to one spine halves the others' ECMP toward them), so on such a lab
# the fib check asks only that every router routes some of them (a policy may withhold a
# prefix from a router: spine2 above) and that the FIB has held still a while; `reach`
# still requires every host to answer every other.

USER_STABLE_S = 1.0
_user_fib: dict[str, tuple[float, float, dict[str, dict[str, int]]]] = {}  # lab -> since, seen, widths


def user_config(plan: Plan) -> bool:
    """Does any router run FRR configuration the user wrote?"""
    return plan.frr_configs is not None or any(n.frr_snippet for n in plan.frr_nodes)


def unrouted(widths: dict[str, dict[str, int]]) -> list[str]:
    """Routers that route none of the prefixes they should learn: all a user's policy lets
    rocelab say is wrong (pure)."""
    return [f"{name}: none of its {len(ws)} host prefixes routed"
            for name, ws in widths.items() if ws and not any(ws.values())]


def check_fib_user(plan: Plan) -> CheckResult:
    """Every router routes at least one of the prefixes the plan says it learns, and no
    router's widths changed for USER_STABLE_S (successive calls, at most 2 x that apart)."""
    widths, now = fib_widths(plan), time.monotonic()
    since, seen, before = _user_fib.get(plan.lab, (now, now, {}))
    if widths != before or now - seen > 2 * USER_STABLE_S:
        since = now
    _user_fib[plan.lab] = (since, now, widths)
    problems = unrouted(widths)
    routed = len(widths) - len(problems)
    if not problems and now - since < USER_STABLE_S:
        problems.append(f"your FRR configuration: waiting until the FIB holds still for "
                        f"{USER_STABLE_S:g} s (last change {now - since:.2f} s ago)")
    return CheckResult("fib", not problems, problems, routed, len(widths))


class BgpPeer(TypedDict):
    state: str  # "Established", "Idle (Admin)", ...
    prefixes: int  # received


def bgp_sessions(plan: Plan, node: Node) -> dict[str, BgpPeer]:
    """Peer -> {state, prefixes} from `show bgp summary json` (empty while bgpd starts)."""
    data = vtysh_json(plan.lab, node.name, "show bgp ipv4 unicast summary json", daemon="bgpd")
    peers = data.get("peers", {}) if isinstance(data, dict) else {}
    return {p: {"state": v.get("state", "?"), "prefixes": v.get("pfxRcd", 0)}
            for p, v in peers.items()}


Sessions = dict[str, "dict[str, BgpPeer] | str"]  # router -> peers, or its error


def read_sessions(plan: Plan) -> Sessions:
    """Every FRR router's BGP sessions (bgp_sessions), or why they could not be read."""
    def one(node: Node) -> tuple[str, dict[str, BgpPeer] | str]:
        if not netns.exists(node.netns):
            return node.name, "namespace missing"
        try:
            return node.name, bgp_sessions(plan, node)
        except RocelabError as e:
            return node.name, str(e)

    return dict(netns.parallel(one, plan.frr_nodes))


def admin_shut(plan: Plan, read: Sessions) -> set[frozenset[str]]:
    """Router pairs whose session one end shut down on purpose (`neighbor ... shutdown`:
    "Idle (Admin)" there): expected down at both ends."""
    return {frozenset((name, _peer_node(plan, plan.node(name), key)))
            for name, peers in read.items() if isinstance(peers, dict)
            for key, p in peers.items() if "Admin" in str(p["state"])}


def check_bgp(plan: Plan) -> CheckResult:
    """Every configured session Established -- but one the user shut down on purpose
    is expected down at both ends (admin_shut)."""
    read = read_sessions(plan)
    shut = admin_shut(plan, read)
    problems, missing = [], 0
    for name, peers in read.items():
        node = plan.node(name)
        want = sum(1 for i in node.interfaces if i.fabric and frozenset((name, i.peer)) not in shut)
        if isinstance(peers, str):
            problems.append(f"{name}: {peers}")
            missing += want
            continue
        up = sum(1 for p in peers.values() if p["state"] == "Established")
        if up != want:
            missing += abs(want - up)
            problems.append(f"{name} has {up}/{want} sessions Established")
    return CheckResult("bgp", not problems, problems, len(read) - len(problems), len(read), missing)


def _peer_node(plan: Plan, node: Node, key: str) -> str:
    """The router behind a BGP peer key: a port name (unnumbered) or the peer's address."""
    for port in node.interfaces:
        if key in (port.name, plan.peer_address(port)):
            return port.peer
    return key


def check_stp(plan: Plan) -> CheckResult:
    """fabric l2: the planned root won, exactly the planned ports block, the rest forward."""
    problems = [p for p in netns.parallel(lambda n: stp_problem(plan, n), plan.routers) if p]
    n = len(plan.routers)
    return CheckResult("stp", not problems, problems, n - len(problems), n, len(problems))


def read_bridge(plan: Plan, node: Node) -> dict[str, Any]:
    """bridge.bridge_state of a switch, read inside its namespace (RocelabError or OSError)."""
    assert plan.l2 is not None
    with netns.entered(node.netns):
        return bridge.bridge_state(node, plan.l2)


MAC_KEY = "mac "  # in a switch's forwarding state: "mac <host MAC>" -> the port it was learned on


def bridge_forwarding(plan: Plan, st: dict[str, Any]) -> dict[str, str]:
    """A switch's forwarding state from a `read_bridge`: each port's STP state, and the port
    each lab host's MAC was learned on (where frames to that host go; other MACs left out)."""
    hosts = {i.mac for h in plan.hosts for i in h.interfaces}
    return {p.port: p.state for p in st["ports"]} | {
        MAC_KEY + mac: port for mac, port in st.get("fdb", {}).items() if mac in hosts}


def bridge_forwarding_of(plan: Plan, node: Node) -> dict[str, str]:
    """`bridge_forwarding` read from a switch ({} if its namespace is gone)."""
    if not netns.exists(node.netns):
        return {}
    try:
        return bridge_forwarding(plan, read_bridge(plan, node))
    except (RocelabError, OSError):
        return {}


def stp_problem(plan: Plan, node: Node) -> str | None:
    """What about this switch's bridge differs from the planned tree (None: nothing)."""
    try:
        return stp_mismatch(plan, node, read_bridge(plan, node))
    except (RocelabError, OSError) as e:
        return f"{node.name}: {e}"


def stp_mismatch(plan: Plan, node: Node, st: dict[str, Any]) -> str | None:
    """The first way a bridge state read already differs from the planned tree (pure)."""
    assert plan.l2 is not None
    blocked = {port for sw, port in plan.stp_blocked() if sw == node.name}
    root = plan.node(plan.l2.root)
    if plan.l2.stp and not st["root"].endswith(root.bridge_mac):
        return f"{node.name}: STP root is {st['root']}, not {plan.l2.root}"
    for p in st["ports"]:
        want = "blocking" if p.port in blocked else "forwarding"
        if p.state != want:
            return f"{node.name}: port {p.port} {p.state}, not {want}"
    return None


def check_evpn(plan: Plan) -> CheckResult:
    """fabric evpn: every leaf's VNI knows every other leaf's VTEP (type-3 routes)."""
    def one(node: Node) -> str | None:
        try:
            vni = evpn.vni_state(plan, node)
        except RocelabError as e:
            return f"{node.name}: {e}"
        want = evpn.expected_vteps(plan, node)
        if vni["remote_vteps"] != want:
            return (f"{node.name}: VNI {vni['vni']} sees {len(vni['remote_vteps'])}/{len(want)} "
                    "remote VTEPs")
        return None

    leaves = plan.of_kind(Kind.LEAF)
    problems = [p for p in netns.parallel(one, leaves) if p]
    return CheckResult("evpn", not problems, problems, len(leaves) - len(problems), len(leaves),
                       len(problems))


def fabric_checks(plan: Plan) -> list[CheckResult]:
    """The control-plane checks of this fabric, cheapest first, stopping at the first failure."""
    if plan.fabric is FabricMode.L2:
        return [check_stp(plan)]
    out = [check_fib(plan)]
    for check in (check_bgp, check_evpn) if plan.fabric is FabricMode.EVPN else (check_bgp,):
        if not out[-1].ok:
            break
        out.append(check(plan))
    return out


def heard_since(entry: dict[str, object], elapsed_s: float) -> bool:
    """Did this `show bgp neighbors json` entry hear its peer less than elapsed_s ago?

    FRR reports bgpTimerLastRead in whole seconds (ms field, 1 s steps) on a
    1 s clock, so a read is only provably newer than `elapsed_s` ago when
    last_read + 1 s <= elapsed_s.
    """
    if entry.get("bgpState") != "Established":
        return False
    last_read_s = float(entry.get("bgpTimerLastRead", 1e9)) / 1000  # type: ignore[arg-type]
    return last_read_s + 1.0 <= elapsed_s


def _neighbor(entries: dict[str, object], node: Node, peer: str) -> dict[str, object]:
    """From `node`'s `show bgp neighbors json`, the entry for router `peer`
    (unnumbered: keyed by port; /31: by the peer's hostname)."""
    port = next(i.name for i in node.interfaces if i.peer == peer)
    return entries.get(port) or next(  # type: ignore[return-value]
        (e for e in entries.values() if isinstance(e, dict) and e.get("hostname") == peer), {})


def wait_heard(plan: Plan, links: list[tuple[str, str]], since: float, timeout_s: float) -> None:
    """Until BGP on both ends of each router link has heard its peer after monotonic `since`.

    A silent fault drops keepalives without taking the port down; healing it
    leaves each session's hold timer running from the last keepalive read
    before the fault. Until a fresh one arrives, a session can still expire
    after the heal, and the FIB that looks whole now would break again.
    """
    ends = [(a, b) for a, b in links if plan.node(a).is_router and plan.node(b).is_router]
    ends += [(b, a) for a, b in ends]

    def all_heard() -> bool:
        neighbors = {}  # one vtysh query per node and round, however many of its links healed
        for a in dict.fromkeys(a for a, _ in ends):
            data = vtysh_json(plan.lab, a, "show bgp neighbors json", daemon="bgpd")
            neighbors[a] = data if isinstance(data, dict) else {}
        elapsed = time.monotonic() - since
        ends[:] = [(a, b) for a, b in ends
                   if not heard_since(_neighbor(neighbors[a], plan.node(a), b), elapsed)]
        return not ends

    waiting.wait_until(all_heard, timeout_s, 0.2, error=ConvergeTimeout,
                       what="BGP has not heard its peer since the heal",
                       seen=lambda: "on " + ", ".join(f"{a}->{b}" for a, b in ends))


def check_reach_hosts(hosts: list[Node], pairs: list[tuple[str, str]] | None = None,
                      timeout_s: float = 1.0) -> list[tuple[str, str]]:
    """The (src, dst) pairs among `hosts` (or only `pairs`) that get no ICMP echo reply."""
    return unreachable_pairs(hosts, timeout_s, pairs)


def check_reach(plan: Plan, timeout_s: float = 1.0,
                pairs: list[tuple[str, str]] | None = None,
                answered: Answered | None = None) -> CheckResult:
    """Hosts answer ICMP echo: the `pairs` given, else reach.probe_pairs; `answered(done,
    total)` as replies come in."""
    wanted = pairs if pairs is not None else probe_pairs(plan.hosts)
    missing = unreachable_pairs(plan.hosts, timeout_s, wanted, answered,
                                every_nic=plan.planes > 1)  # each plane reaches every host
    return CheckResult("reach", not missing, [f"{s} cannot reach {d}" for s, d in missing],
                       len(wanted) - len(missing), len(wanted), len(missing))


def wait(plan: Plan, timeout_s: float, progress: Progress, marks: dict[str, float]) -> None:
    """Poll fib -> bgp -> reach until all pass; record when each first passed in `marks`.
    Progress: routers converged so far, what is missing and an ETA, then pairs answered."""
    deadline = time.monotonic() + timeout_s  # the reach check gets what is left, up to 2 s
    last: list[CheckResult] = []
    watch = Watch(plan, progress)

    def verified() -> bool:
        last[:] = fabric_checks(plan)
        if all(c.ok for c in last):
            marks.setdefault("bgp_converged", time.monotonic())
            watch.converged()
            last.append(check_reach(plan, min(2.0, max(0.2, deadline - time.monotonic())),
                                    answered=watch.answered))
            watch.reached(last[-1])
            if last[-1].ok:
                marks["verified"] = time.monotonic()
                return True
        watch.polled(last)
        return False

    waiting.wait_until(verified, timeout_s, POLL_S, what=f"lab {plan.lab} did not converge",
                       seen=lambda: " | ".join(c.summary() for c in last if not c.ok),
                       error=ConvergeTimeout)
