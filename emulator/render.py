"""Render every node's configuration in memory (pure: no root, no kernel).

`up` renders the whole lab before it creates the first namespace, so a
template error can never leave half a fabric behind; `rocelab render`
writes the same text to a directory for review.

Besides the per-daemon files the lab's daemons read, every router gets one
integrated `frr.conf` (vtysh's format, interface addresses included, so it
works on a real device too) and every host a `host.sh` with its `ip`
commands: what a lab looks like outside rocelab.
"""

from __future__ import annotations

import json
import re
import traceback
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from . import boundedread, outfile
from .errors import RocelabError, SpecError
from .paths import TEMPLATES_DIR, node_run_dir
from .plan import Homing, Kind, Node, Plan
from .spec import MAX_FILE_BYTES

RA_INTERVAL_S = 1  # fast peer discovery for BGP unnumbered; lab links are cheap
FRR_VERSION = "8.4.4"  # the FRR rocelab is tested with (the reference machine's); informational
INTEGRATED = "frr.conf"  # a router's whole configuration in one file (vtysh integrated format)
HOST_SCRIPT = "host.sh"  # a host's addresses and routes as `ip` commands


SNIPPET = "the overrides frr snippet"  # how errors name a router's `overrides: frr` text
SNIPPET_FILE = "overrides.conf"  # ... and the file it is applied from in the router's run dir
FRR_CONFIGS_FILE = "frr-configs.conf"  # the run dir's copy of the router's frr_configs file
DAEMONS = ("zebra", "bgpd", "bfdd", "staticd")  # every daemon rocelab may start, in start order


@dataclass(frozen=True)
class UserConfig:
    """FRR configuration the user wrote for a router, applied through vtysh once its
    daemons are up (frr.apply_file): a `frr_configs:` file (which replaces the rendered
    configuration) or the `overrides: frr` snippet (after whatever came before)."""

    what: str  # in errors: SNIPPET, or the frr_configs file's absolute path
    text: str
    file: str  # its name in the router's run dir


@dataclass(frozen=True)
class Rendered:
    """Config files per node: {node: {filename: text}}, plus the plan as JSON, the user's
    own configuration per router (in the order it is applied) and the template directory
    the daemon files came from (None: frr-templates/ only)."""

    files: dict[str, dict[str, str]]
    plan_json: str
    user: dict[str, tuple[UserConfig, ...]] = field(default_factory=dict)
    templates: str | None = None


def daemons_for(plan: Plan, node: Node) -> list[str]:
    """FRR daemons a node runs, in start order (zebra first: the others connect to it).

    User configuration may need daemons the plan does not: bfdd for a snippet that
    mentions bfd, staticd for one with `ip route`; a lab with `frr_configs:` runs both
    on every router (its files may configure anything).
    """
    if not node.is_router or not plan.routed:  # hosts; an l2 fabric's switches are bridges
        return []
    anything = plan.frr_configs is not None
    snippet = node.frr_snippet
    bfd = node.bfd or anything or bool(re.search(r"\bbfd\b", snippet))
    static = bool(node.static_routes) or anything or bool(
        re.search(r"^\s*ip(v6)? route ", snippet, re.MULTILINE))
    return ["zebra", "bgpd"] + (["bfdd"] if bfd else []) + (["staticd"] if static else [])


def _environment(templates: Path | None = None) -> jinja2.Environment:
    """Sandboxed: a user's template (run as root by `up`) reaches only the plan's data,
    never Python's internals (`''.__class__.__mro__`, func_globals, ...)."""
    loaders = [jinja2.FileSystemLoader(str(TEMPLATES_DIR))]
    if templates is not None:  # the user's first; a template they lack is ours
        loaders.insert(0, jinja2.FileSystemLoader(str(templates)))
    return SandboxedEnvironment(
        loader=jinja2.ChoiceLoader(loaders),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def template_dir(templates: str | Path) -> Path:
    """A user template directory, checked: it exists and every *.conf.j2 in it replaces
    one of ours (a misspelt name would otherwise be silently ignored)."""
    d = Path(templates).resolve()
    if not d.is_dir():
        raise SpecError(str(templates), "--templates", "is not a directory")
    ours = sorted(p.name for p in TEMPLATES_DIR.glob("*.conf.j2"))
    for f in sorted(d.glob("*.j2")):
        if f.name not in ours:
            raise SpecError(str(f), "--templates", f"replaces no template of ours; ours are "
                            f"{', '.join(ours)} (frr-templates/)")
        try:  # Jinja2 reads it whole, as root: a FIFO or /dev/zero must not get that far
            boundedread.read_bytes(f, MAX_FILE_BYTES)
        except (OSError, ValueError) as e:
            raise SpecError(str(f), "--templates", f"cannot read: {e}") from None
    return d


def _render_template(env: jinja2.Environment, daemon: str, ctx: dict[str, Any],
                     node: Node) -> str:
    """One daemon's file; a template error is one line naming the file, line and router."""
    name = f"{daemon}.conf.j2"
    try:
        return env.get_template(name).render(ctx)
    except jinja2.TemplateSyntaxError as e:
        raise SpecError(e.filename or name, "template", e.message or str(e), e.lineno) from None
    except jinja2.TemplateError as e:
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename.endswith(".j2")]
        where = frames[-1].filename if frames else name
        raise SpecError(where, "template", f"rendering {node.name}: {e}",
                        frames[-1].lineno if frames else None) from None


def read_frr_configs(plan: Plan) -> dict[str, tuple[str, str]]:
    """The topology's `frr_configs:` directory: router -> (path, text) of each
    <router>/frr.conf it holds (other routers keep their rendered configuration)."""
    if plan.frr_configs is None:
        return {}
    base = Path(plan.frr_configs)
    if not base.is_dir():
        raise SpecError(plan.source or "<topology>", "frr_configs", f"{base} is not a directory")
    out = {}
    for node in plan.frr_nodes:
        f = base / node.name / INTEGRATED
        if f.is_file():
            try:  # regular, and at most 1 MiB read (read as root: boundedread)
                out[node.name] = (str(f), boundedread.read_bytes(f, MAX_FILE_BYTES).decode())
            except (OSError, UnicodeDecodeError, ValueError) as e:
                raise SpecError(str(f), "frr_configs", f"cannot read: {e}") from None
    return out


def _replaced(plan: Plan, node: Node, daemon: str, path: str) -> str:
    """A daemon's start-up file on a router whose whole configuration is a frr_configs file:
    its name and log only (vtysh -f applies the file once the daemons are up)."""
    return (f"! {daemon} for {node.name} (lab {plan.lab}) -- rendered by rocelab: the "
            f"configuration is {path}, applied once the daemons are up\n"
            f"hostname {node.name}\n"
            f"log file {node_run_dir(plan.lab, node.name)}/{daemon}.log informational\n!\nend\n")


def render(plan: Plan, templates: str | Path | None = None) -> Rendered:
    """Every node's files. `templates`: a directory whose *.conf.j2 replace ours (the
    ones it lacks are ours). Routers with a `frr_configs:` file start from nothing but
    their name and log, and get the file (and any snippet) from vtysh once up."""
    tdir = template_dir(templates) if templates is not None else None
    env = _environment(tdir)
    replaced = read_frr_configs(plan)
    files: dict[str, dict[str, str]] = {}
    user: dict[str, tuple[UserConfig, ...]] = {}
    for node in plan.nodes:
        ctx = {"plan": plan, "node": node, "rundir": node_run_dir(plan.lab, node.name),
               "ra_interval": RA_INTERVAL_S}
        own = replaced.get(node.name)
        files[node.name] = {
            f"{daemon}.conf": (_replaced(plan, node, daemon, own[0]) if own
                               else _render_template(env, daemon, ctx, node))
            for daemon in daemons_for(plan, node)
        }
        pieces = ([UserConfig(own[0], own[1], FRR_CONFIGS_FILE)] if own else []) + (
            [UserConfig(SNIPPET, node.frr_snippet, SNIPPET_FILE)] if node.frr_snippet else [])
        if pieces:
            user[node.name] = tuple(pieces)
    out = Rendered(files=files, plan_json=json.dumps(plan.to_json(), indent=2) + "\n",
                   user=user, templates=str(tdir) if tdir else None)
    for node in plan.nodes:
        if files[node.name]:
            files[node.name][INTEGRATED] = integrated_config(plan, out, node.name)
        elif node.kind is Kind.HOST:
            files[node.name][HOST_SCRIPT] = host_script(plan, node)
    return out


# Every file `write` puts in a node's directory; only these (and plan.json) are ever replaced.
RENDERED_CONFS = frozenset({f"{daemon}.conf" for daemon in DAEMONS} | {INTEGRATED, HOST_SCRIPT})

# Lines each daemon's file repeats (or that only make sense per daemon): the integrated
# file says them once, at its top, or not at all (log files live in the lab's run dir).
_PER_DAEMON = re.compile(r"^(hostname |log |end$|frr defaults |frr version )")
_HEADER = re.compile(r"^! (\S+ for \S+ \(lab .*\) -- rendered by rocelab|Addresses are set by rocelab)")


def _stanzas(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """A daemon config's lines without its per-daemon lines, and its `interface X` stanzas
    (their body lines) taken out, so the integrated file has one stanza per interface."""
    body: list[str] = []
    interfaces: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if current is not None:
            if line.strip() in ("exit", "!"):
                current = None
            else:
                current.append(line)
            continue
        if line.startswith("interface "):
            current = interfaces.setdefault(line.split()[1], [])
        elif not _PER_DAEMON.match(line) and not _HEADER.match(line):
            body.append(line)
    return body, interfaces


def integrated_config(plan: Plan, rendered: Rendered, node_name: str) -> str:
    """One router's whole FRR configuration in vtysh's integrated format (`frr.conf`).

    `frr version` and `frr defaults`, the hostname, one `interface` stanza per
    interface carrying its address (rocelab sets addresses through netlink; a
    real device needs them from zebra), then every daemon's configuration in
    start order without the lines each one repeats, then the node's `overrides`
    frr snippet, then `end`. A router with a `frr_configs:` file: that file, then
    the snippet. Pure: rendered text in, text out.
    """
    node = plan.node(node_name)
    own = next((u for u in rendered.user.get(node_name, ()) if u.file == FRR_CONFIGS_FILE), None)
    if own is not None:  # the user's file is the whole configuration; the snippet still follows
        body = own.text.rstrip("\n").splitlines()
        while body and body[-1].strip() in ("end", "!", ""):
            body.pop()
        return "\n".join(body + _snippet(node) + ["end"]) + "\n"
    files = rendered.files.get(node_name, {})
    lines = [f"! {node.name} (lab {plan.lab}) -- rendered by rocelab: the whole FRR "
             "configuration of this router", f"frr version {FRR_VERSION}",
             "frr defaults datacenter", f"hostname {node.name}", "!"]
    bodies: list[list[str]] = []
    extra: dict[str, list[str]] = {}
    for daemon in daemons_for(plan, node):
        body, interfaces = _stanzas(files.get(f"{daemon}.conf", ""))
        bodies.append(body)
        for name, stanza in interfaces.items():
            extra.setdefault(name, []).extend(stanza)
    ports = ([("lo", f"{node.loopback}/32")] if node.loopback else []) + \
        [(p.name, p.address) for p in node.interfaces]
    named = {name for name, _ in ports}
    for name, address in ports + [(n, None) for n in extra if n not in named]:
        stanza = ([f" ip address {address}"] if address else []) + extra.get(name, [])
        if stanza:
            lines += [f"interface {name}", *stanza, "exit", "!"]
    for body in bodies:
        lines += _squeeze(body)
    return "\n".join(lines + _snippet(node) + ["end"]) + "\n"


def _snippet(node: Node) -> list[str]:
    if not node.frr_snippet:
        return []
    return ["! overrides: frr (the topology's own configuration for this router)",
            *node.frr_snippet.rstrip("\n").splitlines(), "!"]


def _squeeze(lines: list[str]) -> list[str]:
    """Without leading separators and runs of `!` (what removing lines leaves behind)."""
    out: list[str] = []
    for line in lines:
        if line.strip() == "!" and (not out or out[-1].strip() == "!"):
            continue
        out.append(line)
    return out


def host_script(plan: Plan, node: Node) -> str:
    """A host's network configuration as a shell script of `ip` commands: MTU and state of
    each NIC, its address, a dual-homed host's /32 on lo, then its routes (a multipath
    default route as one route with a `nexthop` per NIC)."""
    lines = ["#!/bin/sh", f"# {node.name} (lab {plan.lab}) -- rendered by rocelab: its addresses "
             "and routes", "set -e"]
    if len(node.interfaces) > 1:  # as realize sets them: a dead leaf's next hop is dropped
        policy = "1" if node.ecmp_hash.value == "l4" else "0"
        lines += ["sysctl -qw net.ipv4.conf.all.ignore_routes_with_linkdown=1",
                  f"sysctl -qw net.ipv4.fib_multipath_hash_policy={policy}"]
    for p in node.interfaces:
        lines.append(f"ip link set dev {p.name} mtu {plan.port_mtu(p)} up")
        if p.address:
            lines.append(f"ip address add {p.address} dev {p.name}")
    if node.homing is Homing.DUAL and node.loopback:
        lines.append(f"ip address add {node.loopback}/32 dev lo")
    for route in node.routes:
        dst = "default" if route.dst == "0.0.0.0/0" else route.dst
        if len(route.via) == 1:
            (gw, dev), = route.via
            lines.append(f"ip route add {dst} via {gw} dev {dev}")
        else:
            lines.append(f"ip route add {dst} " + " ".join(
                f"nexthop via {gw} dev {dev}" for gw, dev in route.via))
    return "\n".join(lines) + "\n"


def node_files(entries: Iterable[Path], nodes: Collection[str],
               names: Collection[str]) -> tuple[list[Path], list[Path]]:
    """(owned, foreign) among `entries`, each meant to be a node's directory (a real one,
    named after one of `nodes`) holding only regular files named in `names`: what an
    earlier render or export wrote there, and anything else."""
    owned: list[Path] = []
    foreign: list[Path] = []
    for entry in entries:
        if entry.name not in nodes or entry.is_symlink() or not entry.is_dir():
            foreign.append(entry)
            continue
        for f in sorted(entry.iterdir()):
            (owned if f.name in names and f.is_file() and not f.is_symlink() else foreign).append(f)
    return owned, foreign


def _refuse(out: Path, why: str) -> RocelabError:
    return RocelabError(f"{out}: {why}; render into a new or empty directory, or over an earlier "
                        "rocelab render (nothing was changed)")


def earlier_render(out: Path) -> list[Path]:
    """The files an earlier `rocelab render` left in `out` (plan.json first); [] if it is empty.

    An earlier render is recognised by its plan.json (a rocelab plan) and owns only
    plan.json and <node>/<file> (RENDERED_CONFS) for the nodes that plan names. Anything else
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
    owned, foreign = node_files((e for e in sorted(out.iterdir()) if e != plan_json), nodes,
                                RENDERED_CONFS)
    owned.insert(0, plan_json)
    if foreign:
        raise _refuse(out, f"holds {foreign[0].relative_to(out)}, which no rocelab render wrote")
    return owned


def write(rendered: Rendered, out: Path) -> list[Path]:
    """Write a rendered lab into `out`: plan.json, <router>/<daemon>.conf and frr.conf,
    <host>/host.sh, and nothing else.

    `out` ends up holding exactly this render: a new or empty directory is filled,
    an earlier rocelab render (of any topology) is replaced, and a directory
    holding anything else is refused before anything is written or removed.
    """
    old = earlier_render(out)
    for f in old:
        f.unlink()
    for d in sorted({f.parent for f in old} - {out}):
        d.rmdir()  # empty: earlier_render refused anything it did not own
    outfile.make_dir(out)
    written = [outfile.write_text(out / "plan.json", rendered.plan_json)]
    for node, files in rendered.files.items():
        for name, text in files.items():
            target = out / node / name
            outfile.make_dir(target.parent)
            outfile.write_text(target, text)
            written.append(target)
    return written
