"""Faults: fail and heal links and nodes of a running lab, recorded and recoverable.

    link  carrier loss: both router ends of the link go admin-down, so both
          routers see the link die at once, as both optics would report loss
          of signal. (Downing one end leaves the other to the kernel's
          linkwatch, which may delay a veth peer's carrier-down by up to a
          second.) silent: both ends drop every frame on ingress and carrier
          stays up (see effects.py).
    node  every link of the node fails the same way: carrier (as when a
          switch loses power and its optics go dark) or silent (a hung switch
          that keeps its lasers on). The node's FRR daemons are left
          running; docs/faults.md says why.
    plane every spine of one plane of a multi-plane fabric fails as a node
          does (carrier or silent): that plane's leaves reach nothing.
    flap  a link failed and healed `count` times, one cycle per `period`.
    gray  a link that stays up but loses, corrupts or slows what crosses it
          (loss_pct, corrupt_pct, rate_bps on a link fault; see effects.py).

The package, by concern:
    model     what a fault is, pure: its target, the links it cuts, its port effects
    effects   the effects in the kernel: apply, undo, read back (scan)
    inject    fail / heal / flap / apply, recorded in faults.json; active()
    recovery  what routing must become, a FIB watcher, `settle` and convergence times
    impact    a fault during transfers in flight: interruption, slowdown, integrity
"""

from .inject import active, apply, events, fail, flap, heal, parse_action
from .model import (
    Convergence,
    Fault,
    FaultError,
    FaultEvent,
    FaultKind,
    FlapEvent,
    HealEvent,
    after_state,
    effects_of,
    gray_args,
    link_fault,
    links_of,
    node_fault,
    plane_fault,
)
from .recovery import (
    FibWatcher,
    convergence,
    expected_fib,
    expected_forwarding,
    fail_settled,
    heal_settled,
    mismatched,
    settle,
)

__all__ = [
    "Convergence", "Fault", "FaultError", "FaultEvent", "FaultKind", "FibWatcher", "FlapEvent",
    "HealEvent", "active", "after_state", "apply", "convergence", "effects_of", "events",
    "expected_fib", "expected_forwarding", "fail", "fail_settled", "flap", "gray_args", "heal",
    "heal_settled", "link_fault", "links_of", "mismatched", "node_fault", "parse_action", "plane_fault",
    "settle",
]
