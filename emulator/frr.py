"""FRR daemons per router namespace, driven through FRR's own binaries.

Each router gets its own run dir holding its configs, pid files, zserv
socket and vty sockets; nothing is shared between namespaces (bfdd gets its
own --bfdctl socket too). Daemons are started from a thread that has
entered the router's namespace, so they inherit it, and they carry
ROCELAB_LAB=<lab> in their environment so `down` can find them by PID from
/proc even when the state file is gone.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from . import netns
from .errors import RealizeError, RocelabError
from .paths import FRR_BIN_DIR, lab_run_dir, node_run_dir
from .plan import Node, Plan
from .render import Rendered, daemons_for
from .state import base_env

FRR_USER = "frr"
ZSERV = "zserv.api"
START_TIMEOUT_S = 10.0
VTYSH_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Daemon:
    node: str
    name: str
    pid: int


def prepare_run_dirs(plan: Plan, rendered: Rendered) -> None:
    """Write configs into per-node run dirs that user `frr` can use.

    FRR drops privileges to `frr`, so its dirs are owned by frr and every
    parent must be world-searchable (a 0700 mkdtemp breaks it).
    """
    try:
        uid, gid = pwd.getpwnam(FRR_USER).pw_uid, grp.getgrnam(FRR_USER).gr_gid
    except KeyError:
        raise RealizeError("user 'frr' does not exist: is FRR installed? (make setup)") from None
    lab_dir = lab_run_dir(plan.lab)
    lab_dir.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    lab_dir.mkdir(mode=0o755, exist_ok=True)
    for p in (lab_dir.parent, lab_dir):
        p.chmod(0o755)
    for node in plan.frr_nodes:
        d = node_run_dir(plan.lab, node.name)
        d.mkdir(mode=0o755, exist_ok=True)
        os.chown(d, uid, gid)
        for name, text in rendered.files[node.name].items():
            f = d / name
            f.write_text(text)
            os.chown(f, uid, gid)


def daemon_argv(plan: Plan, node: Node, daemon: str) -> list[str]:
    d = node_run_dir(plan.lab, node.name)
    argv = [str(FRR_BIN_DIR / daemon), "-f", str(d / f"{daemon}.conf"), "-i", str(d / f"{daemon}.pid"),
            "-z", str(d / ZSERV), "--vty_socket", str(d), "-P", "0", "--limit-fds", "1024"]
    if daemon == "bgpd":
        argv += ["-F", "datacenter"]
    if daemon == "bfdd":
        argv += ["--bfdctl", str(d / "bfdd.sock")]
    return argv


def _spawn(plan: Plan, node: Node, daemon: str) -> subprocess.Popen[bytes]:
    d = node_run_dir(plan.lab, node.name)
    with netns.entered(node.netns), open(d / f"{daemon}.out", "wb") as out:
        return subprocess.Popen(
            daemon_argv(plan, node, daemon), env=base_env(plan.lab), cwd=d,
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)  # survive the CLI; reaped by `down`


def start_all(plan: Plan, started: list[Daemon]) -> float:
    """Start every router's daemons, appending each to `started` as soon as it exists.

    All zebras start at once; a router's other daemons start the moment its
    zebra's zserv socket appears (they connect to it, and a bgpd that finds
    no zebra waits seconds before retrying). Returns the CPU seconds this
    process spent spawning: our share of the phase. Its wall time is FRR
    loading and zebra initialising (~55 ms CPU each) on two cores, and
    inflates any wall-clock timing of the spawn calls themselves.
    """
    cpu0 = time.process_time()
    waiting: dict[str, subprocess.Popen[bytes]] = {}
    for node in plan.frr_nodes:
        proc = _spawn(plan, node, "zebra")
        started.append(Daemon(node.name, "zebra", proc.pid))
        waiting[node.name] = proc
    deadline = time.monotonic() + START_TIMEOUT_S
    while waiting:
        for name, proc in list(waiting.items()):
            if (node_run_dir(plan.lab, name) / ZSERV).exists():
                del waiting[name]
                node = plan.node(name)
                for daemon in daemons_for(plan, node)[1:]:
                    started.append(Daemon(name, daemon, _spawn(plan, node, daemon).pid))
            elif proc.poll() is not None:
                raise RealizeError(f"zebra on {name} exited with status {proc.returncode} at "
                                   f"start (see {node_run_dir(plan.lab, name)}/zebra.out)")
        if waiting and time.monotonic() > deadline:
            raise RealizeError(f"zebra did not open its socket within {START_TIMEOUT_S:.0f} s on "
                               + ", ".join(sorted(waiting)))
        time.sleep(0.002)  # poll interval while zebras start
    return time.process_time() - cpu0


def vtysh(lab: str, node: str, command: str, daemon: str | None = None) -> str:
    argv = ["vtysh", "--vty_socket", str(node_run_dir(lab, node))]
    if daemon:
        argv += ["-d", daemon]
    argv += ["-c", command]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=VTYSH_TIMEOUT_S,
                             env=base_env(lab))
    except subprocess.TimeoutExpired:
        raise RocelabError(f"vtysh on {node} timed out: {command}") from None
    if res.returncode != 0:
        raise RocelabError(f"vtysh on {node} failed ({res.returncode}): "
                           f"{(res.stderr or res.stdout).strip().splitlines()[-1:]}")
    return res.stdout


def vtysh_json(lab: str, node: str, command: str, daemon: str | None = None) -> Any:
    out = vtysh(lab, node, command, daemon)
    try:
        return json.loads(out) if out.strip() else {}
    except json.JSONDecodeError:
        raise RocelabError(f"vtysh on {node}: not JSON from {command!r}: {out[:80]!r}") from None
