"""The lab's state file, the labs the kernel knows, and the lab a command means.

`lab_plan`/`resolve_lab`: the lab a command means and its plan. The processes a
lab starts, and how `down` finds and stops them, are procs.py's.

The state file is a convenience (what `status` shows, which topology was
used); the kernel is the truth. Every question `down` asks -- which
namespaces, which processes -- can be answered from the kernel alone:
namespaces whose lo carries ifalias `rocelab:<lab>`, processes whose
environment carries ROCELAB_LAB=<lab>.
"""

from __future__ import annotations

import json
from typing import Any

from . import names, netns, nstag, procs, rundirs
from .errors import LabNotFoundError, RealizeError, RocelabError
from .paths import RUN_ROOT, state_file
from .plan import Plan, compile_plan
from .spec import Topology, parse


def write(lab: str, data: dict[str, Any]) -> None:
    path = state_file(lab)
    tmp = path.with_suffix(".tmp")
    with rundirs.open_private(tmp, append=False) as f:  # root's only: the spec, the configs' sources
        f.write((json.dumps(data, indent=2) + "\n").encode())
    tmp.replace(path)  # atomic: a reader never sees half a file


def read(lab: str) -> dict[str, Any] | None:
    try:
        return json.loads(state_file(lab).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def namespace_tag(name: str) -> str | None:
    """The rocelab lab a namespace belongs to, from lo's ifalias; None if not ours."""
    return nstag.read(name)


def tagged_namespaces(prefix: str = "") -> dict[str, str]:
    """namespace name -> lab, for every rocelab namespace on the machine (whose name starts
    with `prefix`: a lab's are all named `<lab>-<node>`, and the tag still decides)."""
    found = {}
    for name in netns.list_names():
        lab = namespace_tag(name) if name.startswith(prefix) else None
        if lab:
            found[name] = lab
    return found


def run_dir_labs() -> set[str]:
    try:
        return {p.name for p in RUN_ROOT.iterdir() if p.is_dir()}
    except FileNotFoundError:
        return set()


def known_labs() -> set[str]:
    """Every lab with any trace on this machine: namespaces, processes or run dir. Only lab
    names: a tag or a directory that is not one (any process may set ROCELAB_LAB=..) is not
    a lab rocelab made, and nothing is done with it."""
    found = set(tagged_namespaces().values()) | set(procs.tagged_processes().values()) | run_dir_labs()
    return {lab for lab in found if names.is_lab_name(lab)}


def lab_topology(lab: str) -> Topology:
    """The validated topology a running lab was brought up from (its state file's copy)."""
    record = read(lab)
    if record is None:
        if lab in known_labs():
            raise RealizeError(f"lab {lab} has no state file (crashed?): run `rocelab down {lab}`")
        raise LabNotFoundError(f"no lab named {lab}; running labs: "
                               f"{', '.join(sorted(known_labs())) or 'none'}")
    return parse(record["spec"], record.get("topology") or lab)


def lab_plan(lab: str) -> Plan:
    """The plan of a running lab, recompiled from the spec its state file recorded."""
    topo = lab_topology(lab)
    return compile_plan(topo, (read(lab) or {}).get("topology", ""))


def resolve_lab(lab: str | None) -> str:
    """The lab a command means: the one given (a lab name; "" is not "none given"), or the
    only one running."""
    if lab is not None:
        return names.check_lab(lab)
    labs = sorted(known_labs())
    if len(labs) == 1:
        return labs[0]
    if not labs:
        raise LabNotFoundError("no lab is running: start one with `rocelab up TOPOLOGY`")
    raise RocelabError(f"several labs are running ({', '.join(labs)}): name one")
