"""What `rocelab status` (and `wait`, `list`, the API) report about a running lab.

Two words, two meanings:

    converged  routing has settled to what the plan and the faults in force
               require: every surviving router's kernel FIB holds exactly the
               ECMP widths `faults.expected_fib` computes for the active faults,
               and every BGP session on a link that is not cut is Established.
               A lab with a failed link is converged once routing went around it.
               fabric l2 (no routing): every live switch port is in the state
               802.1D settles on around the active faults (Plan.stp_tree), and no
               host MAC is learned off that tree (faults.mismatched: the target
               and test `fail` and `heal` wait for too); healthy adds the planned
               root and exactly the planned ports blocked. fabric evpn adds:
               every leaf's VNI lists every other live leaf as a remote VTEP.
    healthy    converged with nothing failed: no active fault, every session up,
               full ECMP everywhere, and every host answers every other host.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass
from typing import Any

from pyroute2 import IPRoute

from . import converge, evpn, faults, netns, waiting
from .errors import ConvergeTimeout, RocelabError
from .faults.model import AfterState, link_alive
from .plan import Homing, Kind, Node, Plan
from .reach import probe_pairs
from .spec import FabricMode


@dataclass
class RouterStatus:
    node: str
    kind: str
    asn: int | None
    sessions_up: int
    sessions_configured: int
    sessions_expected: int  # configured, less those on links the active faults cut
    prefixes_received: int
    ecmp_min: int  # toward the host prefixes it must learn (0 = some missing)
    ecmp_max: int
    ecmp_expected: int  # the widest on a healthy fabric
    fib_as_expected: bool  # every width what the active faults require
    ecmp_expected_min: int = 0  # the narrowest on a healthy fabric (3-tier: 1 within a pod)
    ecmp_full: bool = True  # every width what a healthy fabric has
    failed: bool = False  # the router itself is failed (a node fault)
    error: str | None = None

    @property
    def converged(self) -> bool:
        return self.failed or (self.error is None and self.fib_as_expected
                               and self.sessions_up >= self.sessions_expected)

    @property
    def ok(self) -> bool:
        """Healthy: every session up and full ECMP."""
        return (self.error is None and self.sessions_up == self.sessions_configured
                and self.ecmp_full)


def active_after(plan: Plan) -> tuple[list[dict[str, Any]], AfterState]:
    """The faults in force (recorded by `rocelab fail`, or found in the kernel) and what
    routing must converge to with them."""
    active = faults.active(plan)
    return active, faults.after_state(plan, [faults.Fault.from_json(r) for r in active])


def expected_sessions(node: Node, after: AfterState,
                      shut: AbstractSet[frozenset[str]] = frozenset()) -> int:
    """BGP sessions `node` should have Established once `after` is in force (less those
    the user shut down)."""
    up = link_alive(after)
    return sum(1 for i in node.interfaces if i.fabric and up(node.name, i.peer)
               and frozenset((node.name, i.peer)) not in shut)


def router_status(plan: Plan, node: Node, after: AfterState, expected: dict[str, int] | None,
                  peers: dict[str, converge.BgpPeer] | str,
                  shut: AbstractSet[frozenset[str]] = frozenset()) -> RouterStatus:
    """One router; `peers`: its BGP sessions (converge.read_sessions) or why they could not
    be read; `shut`: sessions the user shut down, expected down (not counted)."""
    configured = sum(1 for i in node.interfaces
                     if i.fabric and frozenset((node.name, i.peer)) not in shut)
    have = converge.fib_widths_of(plan, node)
    widths = list(have.values()) or [0]
    healthy = plan.expected_widths().get(node.name, {})
    listed = {} if isinstance(peers, str) else peers
    return RouterStatus(node=node.name, kind=node.kind.value, asn=node.asn,
                        sessions_up=sum(1 for p in listed.values() if p["state"] == "Established"),
                        sessions_configured=configured,
                        sessions_expected=expected_sessions(node, after, shut),
                        prefixes_received=sum(int(p["prefixes"] or 0) for p in listed.values()),
                        ecmp_min=min(widths), ecmp_max=max(widths),
                        ecmp_expected=max(healthy.values(), default=0),
                        ecmp_expected_min=min(healthy.values(), default=0),
                        ecmp_full=have == healthy if expected is not None or not healthy
                        else any(have.values()),
                        fib_as_expected=have == expected if expected is not None
                        else not have or any(have.values()),
                        failed=node.name in after["failed_nodes"],
                        error=peers if isinstance(peers, str) else None)


def bridge_status(plan: Plan, node: Node, after: AfterState,
                  expected: dict[str, str] | None) -> dict[str, Any]:
    """A bridging switch: STP root, each port's state and role, MAC table size, and whether
    its ports are where the tree 802.1D settles on around the active faults has them, with
    no host MAC learned off that tree (`expected`: faults.expected_forwarding, judged by
    faults.mismatched: the same target and test `fail` and `heal` wait for)."""
    assert plan.l2 is not None
    row: dict[str, Any] = {"node": node.name, "kind": node.kind.value,
                           "failed": node.name in after["failed_nodes"], "error": None}
    try:
        st = converge.read_bridge(plan, node)
    except (RocelabError, OSError) as e:
        return row | {"error": str(e), "converged": row["failed"], "ok": False, "ports": []}
    planned = converge.stp_mismatch(plan, node, st) is None
    settled = not faults.mismatched(converge.bridge_forwarding(plan, st), expected or {})
    st.pop("fdb", None)
    ports = [asdict(p) for p in st.pop("ports")]
    return row | st | {"ports": ports, "blocked": [p["port"] for p in ports
                                                    if p["state"] == "blocking"],
                       "converged": row["failed"] or settled, "ok": planned}


def evpn_status(plan: Plan, node: Node, after: AfterState) -> dict[str, Any]:
    """An EVPN leaf: its VNI, VTEP, remote VTEPs and the type-2/type-3 routes it holds."""
    row: dict[str, Any] = {"node": node.name, "failed": node.name in after["failed_nodes"]}
    try:
        vni, routes = evpn.vni_state(plan, node), evpn.route_counts(plan, node)
    except RocelabError as e:
        return row | {"error": str(e), "converged": row["failed"], "ok": False}
    want = evpn.expected_vteps(plan, node, set(after["failed_nodes"]))
    every = evpn.expected_vteps(plan, node)
    return row | vni | routes | {"error": None, "remote_vteps_expected": len(every),
                                 "converged": row["failed"] or vni["remote_vteps"] == want,
                                 "ok": vni["remote_vteps"] == every}


def _plane_of(plan: Plan, k: int) -> dict[str, Any]:
    """A multi-plane fabric's rail k is plane k: its index and spines ({} otherwise)."""
    if plan.planes < 2:
        return {}
    return {"plane": k, "spines": [n.name for n in plan.plane_nodes(k) if n.kind is Kind.SPINE]}


def rail_traffic(plan: Plan) -> list[dict[str, Any]]:
    """Rail-optimized fabrics: per rail (NIC index), its leaves and the bytes every host's
    NIC on it has sent and received (kernel counters); [] when no host has rails."""
    rail_hosts = [h for h in plan.hosts if h.homing is Homing.RAIL]
    if not rail_hosts:
        return []
    counters = dict(netns.parallel(lambda h: (h.name, _nic_bytes(h)), rail_hosts))
    rails: dict[int, dict[str, Any]] = {}
    for h in rail_hosts:
        for p in h.interfaces:
            r = rails.setdefault(p.rail or 0, {"rail": p.rail or 0, "leaves": [], "tx_bytes": 0,
                                               "rx_bytes": 0} | _plane_of(plan, p.rail or 0))
            if p.peer not in r["leaves"]:
                r["leaves"].append(p.peer)
            tx, rx = counters.get(h.name, {}).get(p.name, (0, 0))
            r["tx_bytes"] += tx
            r["rx_bytes"] += rx
    return [rails[k] for k in sorted(rails)]


def _nic_bytes(host: Node) -> dict[str, tuple[int, int]]:
    """A host's NICs: name -> (tx bytes, rx bytes)."""
    if not netns.exists(host.netns):
        return {}
    with netns.entered(host.netns), IPRoute() as ipr:
        out = {}
        for link in ipr.get_links():
            stats = link.get_attr("IFLA_STATS64") or {}
            out[link.get_attr("IFLA_IFNAME")] = (stats.get("tx_bytes", 0), stats.get("rx_bytes", 0))
        return out


def lab_status(plan: Plan, reach_timeout_s: float = 1.0) -> dict[str, Any]:
    """The lab's routers (bridges on l2, VNIs on evpn), hosts, faults, and whether it is
    converged and healthy. On a lab running the user's own FRR policy the plan cannot
    say how wide each route is: a router is then converged when it routes some of its
    prefixes (`user_config` in the JSON says so)."""
    active, after = active_after(plan)
    user = converge.user_config(plan)
    expected = None if user else faults.expected_fib(plan, after)
    sessions = converge.read_sessions(plan)
    shut = converge.admin_shut(plan, sessions)
    routers: list[RouterStatus] = netns.parallel(
        lambda n: router_status(plan, n, after, (expected or {}).get(n.name),
                                sessions.get(n.name, "not read"), shut), plan.frr_nodes)
    tree = faults.expected_forwarding(plan, after) if plan.fabric is FabricMode.L2 else {}
    bridges: list[dict[str, Any]] = netns.parallel(
        lambda n: bridge_status(plan, n, after, tree.get(n.name)),
        plan.routers if plan.fabric is FabricMode.L2 else [])
    vnis: list[dict[str, Any]] = netns.parallel(
        lambda n: evpn_status(plan, n, after),
        plan.of_kind(Kind.LEAF) if plan.fabric is FabricMode.EVPN else [])
    converged = all(r.converged for r in routers) and all(
        x["converged"] for x in bridges + vnis)
    whole = converged and not active and all(r.ok for r in routers) and all(
        x["ok"] for x in bridges + vnis)
    pairs = probe_pairs(plan.hosts)
    reach = converge.check_reach(plan, reach_timeout_s, pairs) if whole else None
    return {
        "lab": plan.lab,
        "converged": converged,
        "healthy": bool(reach and reach.ok),
        "fabric": plan.fabric.value,
        "user_config": user,
        "addressing": plan.addressing.value,
        "routers": [asdict(r) | {"ok": r.ok, "converged": r.converged} for r in routers],
        "bridges": bridges,
        "evpn": vnis,
        "hosts": [{"node": h.name, "role": h.role, "leaf": h.leaf, "leaves": h.leaves,
                   "homing": h.homing.value, "address": h.address, "addresses": h.addresses}
                  for h in plan.hosts],
        "rails": rail_traffic(plan),
        "reachability": None if reach is None else {
            "ok": reach.ok, "problems": reach.problems, "pairs": len(pairs),
            "full_mesh": len(pairs) == len(plan.hosts) * (len(plan.hosts) - 1)},
        "faults": active,
        "shape": plan.shape(),
        "spines": len(plan.of_kind(Kind.SPINE)),
        "leaves": len(plan.of_kind(Kind.LEAF)),
    }


def verdict(st: dict[str, Any]) -> str:
    """One line: healthy, converged (and why not healthy), or not converged (and where)."""
    if st["healthy"]:
        return "healthy"
    if st["converged"]:
        why = (f"{len(st['faults'])} active fault(s)" if st["faults"]
               else "; ".join(st["reachability"]["problems"][:3]) if st["reachability"]
               else "not every session up or full ECMP")
        return f"converged, not healthy: {why}"
    bad = [r["node"] for r in st["routers"] + st.get("bridges", []) + st.get("evpn", [])
           if not r["converged"]]
    return f"NOT converged: {', '.join(bad)} not as the plan and active faults require"


UNTIL = ("converged", "healthy")
POLL_S = 0.2


def wait_until(plan: Plan, until: str, timeout_s: float,
               progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Poll the lab's status until it is `converged` or `healthy`; return that status.
    ConvergeTimeout (exit 6) saying what it last saw if that does not happen in time."""
    if until not in UNTIL:
        raise RocelabError(f"--until: must be one of {', '.join(UNTIL)} (got {until!r})")
    last: list[dict[str, Any]] = []

    def reached() -> dict[str, Any] | None:
        last[:] = [lab_status(plan)]
        if last[0][until]:
            return last[0]
        progress(verdict(last[0]))
        return None

    return waiting.wait_until(reached, timeout_s, POLL_S, what=f"lab {plan.lab} not {until}",
                              seen=lambda: verdict(last[0]), error=ConvergeTimeout)
