"""What a lab will cost the machine, before anything exists: `render` prints it, `up` refuses
a lab that would not fit.

Memory is a model fitted to labs measured on the reference machine (`make bench`, section
scale: each lab's processes' PSS and what the kernel grew by; it prints estimate / measured):

    fixed      50 MB   this process at its peak, the dataplane controller
    router    6.5 MB   zebra, bgpd, staticd (bfdd) before any route
    namespace 1.75 MB  a namespace with its veth ends, sysctls and FIB
    path      3.3 KB   each prefix the fabric announces, at each BGP session end: bgpd's
                       path and buffers, zebra's and the kernel's share of the route
    host kind          what `up` starts for each host of its kind (emulator/hosts/): an
                       rxe host's QEMU guest (512 MB), nothing for an engine host (its
                       engine starts on its first transfer)

The paths make it grow faster than the routers: a 3-tier fabric of 264 routers with a /31
per host NIC carries 3.6 million of them, with one /24 per leaf (bgp.aggregate_hosts) 1.2
million. Fitted to the curve of 8, 24, 66, 132 and 264 routers (aggregated) measured on a
quiet machine, the estimate was within 15 % of the measured memory at every size
(docs/scale.md); the same lab measured beside others' labs can differ by a third. Time is not
estimated: docs/scale.md has the measured curve.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from .errors import HostLimitError
from .hosts import kind_of
from .plan import Plan
from .render import daemons_for

FIXED_MB = 50.0
ROUTER_MB = 6.5
NAMESPACE_MB = 1.75
PATH_KB = 3.3
HEADROOM = 0.9  # of MemAvailable: the kernel and everything else keep a tenth


@dataclass(frozen=True)
class Estimate:
    namespaces: int
    links: int
    routers: int
    hosts: int
    processes: int  # FRR daemons (+1: the dataplane controller on a shaped lab), rxe guests
    bgp_sessions: int  # session ends: two per fabric link on a routed fabric
    memory_mb: int

    def to_json(self) -> dict[str, int]:
        return asdict(self)

    def parts(self) -> str:
        return (f"{self.namespaces} namespaces, {self.processes} processes, "
                f"{self.bgp_sessions // 2} BGP sessions")

    def summary(self) -> str:
        return f"{self.parts()}, about {_mb(self.memory_mb)} of memory"


def fits(est: Estimate, available: int) -> bool:
    """Does the estimated memory fit in HEADROOM of `available` MB?"""
    return est.memory_mb <= available * HEADROOM


def bgp_paths(plan: Plan) -> int:
    """Routes every BGP session end carries on a healthy fabric: the prefixes the fabric
    announces (each router's loopback, and the host prefixes or the leaves' /24s) times the
    session ends -- bgpd keeps each as a path, and zebra and the kernel the best of them."""
    routers = plan.frr_nodes
    sessions = sum(1 for r in routers for i in r.interfaces if i.fabric)
    return sessions * (len(plan.fib_targets()) + len(routers)) if routers else 0


def estimate(plan: Plan) -> Estimate:
    """The lab's size and memory (pure)."""
    routers = plan.frr_nodes
    sessions = sum(1 for r in routers for i in r.interfaces if i.fabric)
    kinds = [kind_of(h) for h in plan.hosts]
    processes = (sum(len(daemons_for(plan, r)) for r in routers) + (1 if plan.congestion else 0)
                 + sum(k.boot_processes for k in kinds))
    memory = (FIXED_MB + ROUTER_MB * len(routers)
              + NAMESPACE_MB * len(plan.nodes) + PATH_KB * bgp_paths(plan) / 1024
              + sum(k.boot_memory_mb for k in kinds))
    return Estimate(len(plan.nodes), len(plan.links), len(plan.routers), len(plan.hosts),
                    processes, sessions, round(memory))


def available_mb() -> int:
    """MemAvailable of this machine, in MB."""
    with open("/proc/meminfo") as f:
        for row in f:
            if row.startswith("MemAvailable:"):
                return int(row.split()[1]) // 1024
    return 0


def free_namespaces() -> int | None:
    """Network namespaces this user may still create (None: no limit readable)."""
    try:
        with open("/proc/sys/user/max_net_namespaces") as f:
            limit = int(f.read())
    except (OSError, ValueError):
        return None
    return limit - len(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else limit


def check(plan: Plan, available: int | None = None, namespaces_left: int | None = -1) -> Estimate:
    """HostLimitError (exit 12) if the estimate does not fit the machine; the estimate."""
    est = estimate(plan)
    have = available_mb() if available is None else available
    if not fits(est, have):
        raise HostLimitError(
            f"lab {plan.lab} needs about {_mb(est.memory_mb)} of memory ({est.parts()}) but "
            f"this machine has {_mb(have)} available (rocelab uses at most "
            f"{HEADROOM:.0%} of it): use a smaller topology or free memory; nothing was created")
    left = free_namespaces() if namespaces_left == -1 else namespaces_left
    if left is not None and est.namespaces > left:
        raise HostLimitError(
            f"lab {plan.lab} needs {est.namespaces} network namespaces but user.max_net_namespaces "
            f"leaves {left}: raise it or use a smaller topology; nothing was created")
    return est


def _mb(mb: float) -> str:
    return f"{mb / 1024:.1f} GB" if mb >= 1024 else f"{mb:.0f} MB"
