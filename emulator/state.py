"""The lab's state file and the kernel-side discovery `down` relies on.

The state file is a convenience (what `status` shows, which topology was
used); the kernel is the truth. Every question `down` asks -- which
namespaces, which processes -- can be answered from the kernel alone:
namespaces whose lo carries ifalias `rocelab:<lab>`, processes whose
environment carries ROCELAB_LAB=<lab>.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from . import netns
from .paths import ENV_TAG, NS_TAG_PREFIX, RUN_ROOT, state_file


def write(lab: str, data: dict[str, Any]) -> None:
    path = state_file(lab)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)  # atomic: a reader never sees half a file


def read(lab: str) -> dict[str, Any] | None:
    try:
        return json.loads(state_file(lab).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def namespace_tag(name: str) -> str | None:
    """The rocelab lab a namespace belongs to, from lo's ifalias; None if not ours."""
    try:
        with netns.entered(name), IPRoute() as ipr:
            links = ipr.get_links(ifname="lo")
    except OSError:
        return None
    alias = links[0].get_attr("IFLA_IFALIAS") if links else None
    if alias and alias.startswith(NS_TAG_PREFIX):
        return alias[len(NS_TAG_PREFIX):]
    return None


def tagged_namespaces() -> dict[str, str]:
    """namespace name -> lab, for every rocelab namespace on the machine."""
    found = {}
    for name in netns.list_names():
        lab = namespace_tag(name)
        if lab:
            found[name] = lab
    return found


def tagged_processes() -> dict[int, str]:
    """pid -> lab, for every process carrying ROCELAB_LAB in its environment."""
    needle = ENV_TAG.encode() + b"="
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:  # gone, or a kernel thread
            continue
        for var in env.split(b"\0"):
            if var.startswith(needle):
                found[int(entry)] = var[len(needle):].decode(errors="replace")
                break
    return found


def run_dir_labs() -> set[str]:
    try:
        return {p.name for p in RUN_ROOT.iterdir() if p.is_dir()}
    except FileNotFoundError:
        return set()


def known_labs() -> set[str]:
    """Every lab with any trace on this machine: namespaces, processes or run dir."""
    return set(tagged_namespaces().values()) | set(tagged_processes().values()) | run_dir_labs()
