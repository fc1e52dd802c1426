"""The lab's state file and the kernel-side discovery `down` relies on.

Also the tag writer beside the reader: `base_env` is the environment every
process a lab starts carries, `kill_pids` stops processes by PID only; and
`lab_plan`/`resolve_lab`, the lab a command means and its plan.

The state file is a convenience (what `status` shows, which topology was
used); the kernel is the truth. Every question `down` asks -- which
namespaces, which processes -- can be answered from the kernel alone:
namespaces whose lo carries ifalias `rocelab:<lab>`, processes whose
environment carries ROCELAB_LAB=<lab>.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import time
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from . import names, netns, rundirs
from .errors import LabNotFoundError, RealizeError, RocelabError
from .paths import ENV_TAG, NS_TAG_PREFIX, RUN_ROOT, state_file
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


def process_tag(pid: int) -> str | None:
    """The lab a process belongs to (its ROCELAB_LAB), None if none or gone."""
    needle = ENV_TAG.encode() + b"="
    env = _environ(pid)
    return next((v[len(needle):].decode(errors="replace") for v in env.split(b"\0")
                 if v.startswith(needle)), None)


def _environ(pid: int, settle_s: float = 0.05) -> bytes:
    """A process's environment block. A process in the middle of execve reads as empty
    for a moment (its old memory is gone, the new one not yet set up): read it again,
    briefly, so a lab process caught exec'ing is not taken for an untagged one."""
    deadline = time.monotonic() + settle_s
    while True:
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return b""
        if env or time.monotonic() > deadline:
            return env
        time.sleep(0.001)


def rss_kib(pid: int) -> int | None:
    """Resident memory of a process (for QEMU: the guest's touched RAM plus QEMU itself)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def run_dir_labs() -> set[str]:
    try:
        return {p.name for p in RUN_ROOT.iterdir() if p.is_dir()}
    except FileNotFoundError:
        return set()


def known_labs() -> set[str]:
    """Every lab with any trace on this machine: namespaces, processes or run dir. Only lab
    names: a tag or a directory that is not one (any process may set ROCELAB_LAB=..) is not
    a lab rocelab made, and nothing is done with it."""
    found = set(tagged_namespaces().values()) | set(tagged_processes().values()) | run_dir_labs()
    return {lab for lab in found if names.is_lab_name(lab)}


def base_env(lab: str) -> dict[str, str]:
    """A minimal, tagged environment for every process a lab starts."""
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", ENV_TAG: lab}


def kill_pids(pids: list[int], lab: str | None = None, timeout_s: float = 5.0) -> None:
    """SIGTERM the given PIDs, wait up to `timeout_s`, then SIGKILL what is left. Only these
    PIDs, each signalled through a pidfd taken before the first signal (a PID that exits and
    is reused while we wait is never hit), and with `lab` only a process that carries the
    lab's tag, checked before SIGTERM and again before SIGKILL."""
    fds = _pidfds(pids, lab)
    try:
        for fd in fds.values():
            _signal(fd, signal.SIGTERM)
        for pid in _wait_exit(fds, timeout_s):
            if lab is None or process_tag(pid) == lab:
                _signal(fds[pid], signal.SIGKILL)
    finally:
        for fd in fds.values():
            os.close(fd)
    for pid in pids:
        _reap(pid)


def _pidfds(pids: list[int], lab: str | None) -> dict[int, int]:
    """pid -> pidfd, for the PIDs that exist (and, with `lab`, carry its tag)."""
    fds = {}
    for pid in dict.fromkeys(pids):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        if lab is not None and process_tag(pid) != lab:  # gone, or no longer the lab's
            os.close(fd)
            continue
        fds[pid] = fd
    return fds


def _signal(fd: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(fd, sig)


def _wait_exit(fds: dict[int, int], timeout_s: float) -> list[int]:
    """Wait until every process has exited (a pidfd is readable then) or the time is up;
    the PIDs still running."""
    poller = select.poll()
    by_fd = {fd: pid for pid, fd in fds.items()}
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout_s
    while by_fd and (left := deadline - time.monotonic()) > 0:
        for fd, _ in poller.poll(left * 1000):
            poller.unregister(fd)
            _reap(by_fd.pop(fd))
    return list(by_fd.values())


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


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
