"""Render every node's configuration in memory (pure: no root, no kernel).

`up` renders the whole lab before it creates the first namespace, so a
template error can never leave half a fabric behind; `rocelab render`
writes the same text to a directory for review.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import jinja2

from .errors import RocelabError
from .paths import TEMPLATES_DIR, node_run_dir
from .plan import Node, Plan

RA_INTERVAL_S = 1  # fast peer discovery for BGP unnumbered; lab links are cheap


@dataclass(frozen=True)
class Rendered:
    """Config files per node: {node: {filename: text}}, plus the plan as JSON."""

    files: dict[str, dict[str, str]]
    plan_json: str


def daemons_for(plan: Plan, node: Node) -> list[str]:
    """FRR daemons a node runs, in start order (zebra first: the others connect to it)."""
    if not node.is_router or not plan.routed:  # hosts; an l2 fabric's switches are bridges
        return []
    return (["zebra", "bgpd"] + (["bfdd"] if node.bfd else [])
            + (["staticd"] if node.static_routes else []))


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render(plan: Plan) -> Rendered:
    env = _environment()
    files: dict[str, dict[str, str]] = {}
    for node in plan.nodes:
        ctx = {"plan": plan, "node": node, "rundir": node_run_dir(plan.lab, node.name),
               "ra_interval": RA_INTERVAL_S}
        files[node.name] = {
            f"{daemon}.conf": env.get_template(f"{daemon}.conf.j2").render(ctx)
            for daemon in daemons_for(plan, node)
        }
    return Rendered(files=files, plan_json=json.dumps(plan.to_json(), indent=2) + "\n")


# Every file `write` puts in a node's directory; only these (and plan.json) are ever replaced.
RENDERED_CONFS = frozenset(f"{daemon}.conf" for daemon in ("zebra", "bgpd", "bfdd", "staticd"))


def _refuse(out: Path, why: str) -> RocelabError:
    return RocelabError(f"{out}: {why}; render into a new or empty directory, or over an earlier "
                        "rocelab render (nothing was changed)")


def earlier_render(out: Path) -> list[Path]:
    """The files an earlier `rocelab render` left in `out` (plan.json first); [] if it is empty.

    An earlier render is recognised by its plan.json (a rocelab plan) and owns only
    plan.json and <node>/<daemon>.conf for the nodes that plan names. Anything else
    in `out` is someone else's: RocelabError naming it, and nothing is touched.
    """
    if out.exists() and not out.is_dir():
        raise _refuse(out, "is not a directory")
    if not out.exists() or not any(out.iterdir()):
        return []
    plan_json = out / "plan.json"
    if not plan_json.is_file() or plan_json.is_symlink():
        first = sorted(e.name for e in out.iterdir())[0]
        raise _refuse(out, f"not empty ({first}) and not a rocelab render (no plan.json)")
    try:
        earlier = json.loads(plan_json.read_text())
        nodes = {n["name"] for n in earlier["nodes"]} if isinstance(earlier.get("lab"), str) else None
    except (ValueError, KeyError, TypeError, AttributeError):
        nodes = None
    if not nodes:
        raise _refuse(out, "its plan.json is not a rocelab plan")
    owned, foreign = [plan_json], []
    for entry in sorted(out.iterdir()):
        if entry == plan_json:
            continue
        if entry.name not in nodes or entry.is_symlink() or not entry.is_dir():
            foreign.append(entry)
            continue
        for f in sorted(entry.iterdir()):
            (owned if f.name in RENDERED_CONFS and f.is_file() and not f.is_symlink()
             else foreign).append(f)
    if foreign:
        raise _refuse(out, f"holds {foreign[0].relative_to(out)}, which no rocelab render wrote")
    return owned


def write(rendered: Rendered, out: Path) -> list[Path]:
    """Write a rendered lab into `out`: plan.json and <node>/<daemon>.conf, and nothing else.

    `out` ends up holding exactly this render: a new or empty directory is filled,
    an earlier rocelab render (of any topology) is replaced, and a directory
    holding anything else is refused before anything is written or removed.
    """
    old = earlier_render(out)
    for f in old:
        f.unlink()
    for d in sorted({f.parent for f in old} - {out}):
        d.rmdir()  # empty: earlier_render refused anything it did not own
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "plan.json"]
    written[0].write_text(rendered.plan_json)
    for node, files in rendered.files.items():
        for name, text in files.items():
            target = out / node / name
            target.parent.mkdir(exist_ok=True)
            target.write_text(text)
            written.append(target)
    return written
