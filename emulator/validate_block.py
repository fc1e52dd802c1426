"""The topology's `validate:` block against its plan, purely: every name it uses must be
a node of the right kind (netlab-style user expectations; `validate.py` runs them)."""

from __future__ import annotations

from .errors import SpecError
from .plan import Plan
from .spec import Expectation, Topology


def check(topo: Topology, plan: Plan, source: str) -> None:
    """SpecError naming the first expectation that refers to something the plan lacks."""
    for name, exp in topo.validate_.items():
        kind = exp.kind
        where = f"validate.{name}.{kind}"
        for field, want in _roles(exp).items():
            value = getattr(getattr(exp, kind), field)
            allowed = _names(plan, want)
            if value not in allowed:
                raise SpecError(source, f"{where}.{field}",
                                f"no {want} {value!r}; {want}s: {', '.join(allowed)}")
        if kind == "session":
            node, peer = exp.session.node, exp.session.peer  # type: ignore[union-attr]
            if peer not in [i.peer for i in plan.node(node).interfaces]:
                raise SpecError(source, f"{where}.peer", f"{node} has no link to {peer}")
        if kind in ("reach", "transfer"):
            ends = getattr(exp, kind)
            if ends.src == ends.dst:
                raise SpecError(source, f"{where}.dst", f"must differ from src ({ends.src})")


def _roles(exp: Expectation) -> dict[str, str]:
    """Field -> the kind of node it must name."""
    return {"ecmp": {"node": "router", "to": "host"},
            "session": {"node": "router", "peer": "router"},
            "reach": {"src": "host", "dst": "host"},
            "route": {"node": "node"},
            "transfer": {"src": "host", "dst": "host"}}[exp.kind]


def _names(plan: Plan, kind: str) -> list[str]:
    nodes = plan.routers if kind == "router" else plan.hosts if kind == "host" else plan.nodes
    return [n.name for n in nodes]
