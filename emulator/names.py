"""Lab and node names: the topology's own rules, checked in one place.

A lab name becomes a run directory under RUN_ROOT, a namespace prefix and a
process tag; a node name becomes an interface name on its peers. So a name is
checked against these rules before any path, namespace or process is looked
up from it: by the topology file (spec/), by every command that takes a
name (cli/names.py's click types), by the API (api.py) and by `down`.
"""

from __future__ import annotations

import re

from .errors import BadNameError

LAB_NAME = r"[a-z][a-z0-9]{0,14}(-[a-z0-9]+)*"
MAX_LAB_NAME = 24
NODE_NAME = r"[a-z][a-z0-9]{0,11}"  # a node's name is also an interface name (15 bytes) on its peers
LAB_RULE = (f"1-{MAX_LAB_NAME} characters: lowercase letters and digits, starting with a letter, "
            "at most 15 before the first dash, single dashes between them")
NODE_RULE = "1-12 characters: lowercase letters and digits, starting with a letter"
SHOWN = 40  # characters of a bad name an error repeats


def is_lab_name(value: object) -> bool:
    # fullmatch, not match: "lab\n" and "lab/../x" are not names
    return isinstance(value, str) and len(value) <= MAX_LAB_NAME and bool(re.fullmatch(LAB_NAME, value))


def is_node_name(value: object) -> bool:
    return isinstance(value, str) and bool(re.fullmatch(NODE_NAME, value))


def shown(value: object) -> str:
    """A bad value as one short line: repr (a newline shows as \\n), cut after SHOWN characters."""
    text = repr(value) if not isinstance(value, str) or len(value) <= SHOWN else repr(value[:SHOWN]) + "..."
    return text + (f" ({len(value)} characters)" if isinstance(value, str) and len(value) > SHOWN else "")


def check_lab(value: object, what: str = "lab name") -> str:
    """`value` if it is a lab name; else BadNameError naming `what` and the rule."""
    if not is_lab_name(value):
        raise BadNameError(f"{what}: {shown(value)} is not a lab name: must be {LAB_RULE}")
    return value  # type: ignore[return-value]


def check_node(value: object, what: str = "node") -> str:
    """`value` if it is a node name; else BadNameError naming `what` and the rule."""
    if not is_node_name(value):
        raise BadNameError(f"{what}: {shown(value)} is not a node name: must be {NODE_RULE}")
    return value  # type: ignore[return-value]
