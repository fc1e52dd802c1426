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
    if not node.is_router:
        return []
    return ["zebra", "bgpd"] + (["bfdd"] if plan.bfd_enabled else [])


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


def write(rendered: Rendered, out: Path) -> list[Path]:
    """Write a rendered lab under `out`: plan.json and <node>/<daemon>.conf."""
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
