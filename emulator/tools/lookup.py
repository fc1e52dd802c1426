"""The router, node or port a command names; NOT_FOUND errors that list what exists."""

from __future__ import annotations

from ..errors import NodeNotFoundError
from ..plan import Interface, Node, Plan


def node(plan: Plan, name: str) -> Node:
    """Any node of the lab (router or host)."""
    try:
        return plan.node(name)
    except KeyError:
        raise NodeNotFoundError(f"lab {plan.lab} has no node {name!r}; nodes: "
                                f"{', '.join(n.name for n in plan.nodes)}") from None


def router(plan: Plan, name: str) -> Node:
    """A router of the lab: a host or an unknown name is refused, naming the routers."""
    routers = ", ".join(n.name for n in plan.routers)
    try:
        found = plan.node(name)
    except KeyError:
        raise NodeNotFoundError(f"lab {plan.lab} has no router {name!r}; routers: {routers}") from None
    if not found.is_router:
        raise NodeNotFoundError(f"{name} is a {found.kind.value} in lab {plan.lab}, not a router "
                                f"(no FRR); routers: {routers}")
    return found


def port(plan: Plan, node_name: str, port_name: str) -> tuple[Node, Interface]:
    """A node and one of its ports (router ports are named after their peer; hosts have eth0)."""
    found = node(plan, node_name)
    try:
        return found, found.interface(port_name)
    except KeyError:
        raise NodeNotFoundError(f"{node_name} in lab {plan.lab} has no port {port_name!r}; ports: "
                                f"{', '.join(i.name for i in found.interfaces)}") from None
