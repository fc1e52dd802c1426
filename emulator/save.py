"""`rocelab save LAB -o DIR`: a running lab's FRR configuration, as it runs now, and a
topology that rebuilds the lab with it.

Each router's `show running-config` (so edits made live with vtysh are kept) goes to
DIR/<router>/frr.conf, cleaned of what belongs to this lab's run dir and vtysh itself
(log files, vtysh's own hostname); DIR/topology.yaml is the lab's own topology (the copy
its state file holds) with `frr_configs: .` and without `overrides: frr` snippets (the
saved configurations hold them already). `rocelab up DIR/topology.yaml` then brings up
the same fabric running those configurations.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import frr, netns, outfile, state
from .errors import RocelabError
from .paths import RUN_ROOT
from .plan import Plan
from .render import INTEGRATED
from .spec import Topology

TOPOLOGY = "topology.yaml"
MARKER = "# rocelab save of lab"  # the first line of an earlier save's topology.yaml


@dataclass(frozen=True)
class Saved:
    lab: str
    out: Path
    files: list[Path]
    routers: list[str]


def clean_running_config(text: str, router: str, lab: str) -> str:
    """`show running-config` as a file `up` (and a real router) can load: without vtysh's
    banner, its own hostname and `service` line, the log files in the lab's run dir, and
    with one `frr defaults datacenter` (zebra says traditional, bgpd datacenter: rocelab
    starts bgpd with -F datacenter)."""
    lines = text.splitlines()
    while lines and (not lines[0].strip() or lines[0].startswith(("Building configuration",
                                                                  "Current configuration"))):
        lines.pop(0)
    version = next((ln for ln in lines if ln.startswith("frr version ")), None)
    kept = [ln for ln in lines
            if not ln.startswith(("frr version ", "frr defaults ", "hostname ",
                                  "service integrated-vtysh-config"))
            and not re.match(rf"log file {re.escape(str(RUN_ROOT))}/", ln)]
    while kept and kept[0].strip() == "!":
        kept.pop(0)
    kept = _bgp_last(kept)
    head = [f"! {router} (lab {lab}) -- saved by rocelab save: its running configuration",
            *([version] if version else []), "frr defaults datacenter", f"hostname {router}", "!"]
    return "\n".join(head + kept) + "\n"


def _bgp_last(lines: list[str]) -> list[str]:
    """The `router bgp` blocks moved after everything else (before `end`), in their order.

    FRR prints route-maps and prefix-lists after `router bgp`; loaded in that order, a
    `redistribute ... route-map` names a map that does not exist yet, and BGP re-reads it
    only when its route-map delay timer fires (5 s): `up` from a save would take 5 s more.
    """
    bgp: list[str] = []
    rest: list[str] = []
    block: list[str] | None = None
    for ln in lines:
        if block is not None:
            block.append(ln)
            if ln == "exit":
                bgp += block + ["!"]
                block = None
        elif ln.startswith("router bgp"):
            block = [ln]
        else:
            rest.append(ln)
    if block:  # no `exit`: leave it where it ends
        bgp += block
    end = rest.pop() if rest and rest[-1] == "end" else None
    return rest + bgp + ([end] if end else [])


def saved_topology(topo: Topology) -> dict[str, Any]:
    """The lab's topology with `frr_configs: .` and no `overrides: frr` (an override left
    empty goes too): what DIR/topology.yaml holds."""
    data = topo.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    overrides = {}
    for key, o in data.pop("overrides", {}).items():
        o.pop("frr", None)
        if o:
            overrides[key] = o
    if overrides:
        data["overrides"] = overrides
    data["frr_configs"] = "."
    return data


def _refuse(out: Path, why: str) -> RocelabError:
    return RocelabError(f"{out}: {why}; save into a new or empty directory, or over an earlier "
                        "rocelab save (nothing was changed)")


def earlier_save(out: Path) -> list[Path]:
    """The files an earlier `rocelab save` left in `out` (topology.yaml first); [] if empty.

    An earlier save is recognised by its topology.yaml (first line MARKER) and owns only
    that and <dir>/frr.conf in directories holding nothing else. Anything else is someone
    else's: RocelabError naming it, and nothing is touched.
    """
    if out.exists() and not out.is_dir():
        raise _refuse(out, "is not a directory")
    if not out.exists() or not any(out.iterdir()):
        return []
    topo = out / TOPOLOGY
    try:
        ours = topo.is_file() and not topo.is_symlink() and \
            topo.read_text().startswith(MARKER)
    except (OSError, UnicodeDecodeError):
        ours = False
    if not ours:
        first = sorted(e.name for e in out.iterdir())[0]
        raise _refuse(out, f"not empty ({first}) and not a rocelab save (no {TOPOLOGY} "
                      "written by rocelab save)")
    owned, foreign = [topo], []
    for entry in sorted(out.iterdir()):
        if entry == topo:
            continue
        if entry.is_symlink() or not entry.is_dir():
            foreign.append(entry)
            continue
        for f in sorted(entry.iterdir()):
            (owned if f.name == INTEGRATED and f.is_file() and not f.is_symlink()
             else foreign).append(f)
    if foreign:
        raise _refuse(out, f"holds {foreign[0].relative_to(out)}, which no rocelab save wrote")
    return owned


def running_configs(plan: Plan) -> dict[str, str]:
    """Every FRR router's running configuration, cleaned (clean_running_config)."""
    def one(name: str) -> tuple[str, str]:
        text = frr.vtysh(plan.lab, name, "show running-config")
        return name, clean_running_config(text, name, plan.lab)

    return dict(netns.parallel(one, [n.name for n in plan.frr_nodes]))


def save(lab: str, out: Path) -> Saved:
    """Write DIR/<router>/frr.conf (running configs) and DIR/topology.yaml; read every
    router first, so a router that does not answer leaves DIR as it was."""
    topo = state.lab_topology(lab)
    plan = state.lab_plan(lab)
    earlier_save(out)  # refuse a foreign directory before asking any router
    configs = running_configs(plan)
    record = state.read(lab) or {}
    old = earlier_save(out)
    for f in old:
        f.unlink()
    for d in sorted({f.parent for f in old} - {out}):
        d.rmdir()
    outfile.make_dir(out)
    head = [f"{MARKER} {lab} (from {record.get('topology', '?')}) at "
            f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}",
            f"# `rocelab up {out / TOPOLOGY}` rebuilds it with these running FRR configurations",
            "# (frr_configs: . -- each <router>/frr.conf here replaces its rendered one)."]
    written = [out / TOPOLOGY]
    outfile.write_text(written[0], "\n".join(head) + "\n" + yaml.safe_dump(
        saved_topology(topo), sort_keys=False, default_flow_style=False, width=100))
    for name, text in configs.items():
        outfile.make_dir(out / name)
        outfile.write_text(out / name / INTEGRATED, text)
        written.append(out / name / INTEGRATED)
    return Saved(lab, out, written, sorted(configs))
