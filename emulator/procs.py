"""The processes a lab starts: tagged, waited for until ready, found and stopped by PID.

Every helper process (the congestion controller, the engines, an rxe host's QEMU,
the storm watchdog, the metrics exporter) starts through `start`: the lab's tag
in a minimal environment (`base_env`), a umask that keeps its files root's only,
optionally inside a namespace, stdout and stderr to a log of its own, in a session
of its own (a Ctrl-C at the terminal is for the command, not for it). `wait_ready`
then polls a readiness probe (a file appears, or any callable)
against a deadline; if the process exits first or the time runs out, it is killed
by PID and the error says what was waited for and shows the log's last lines.

`down` finds a lab's processes from /proc alone (`tagged_processes`: the
ROCELAB_LAB=<lab> in their environment) and stops them by PID (`kill_pids`).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import netns, rundirs
from .errors import RealizeError
from .paths import ENV_TAG
from .waiting import wait_until

TAIL_LINES = 3  # of a helper's log, in the error when it fails to start
Error = Callable[[str], Exception]


def base_env(lab: str) -> dict[str, str]:
    """A minimal, tagged environment for every process a lab starts."""
    return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", ENV_TAG: lab}


# -- starting a helper and waiting until it is ready ---------------------------------

@dataclass(frozen=True)
class Ready:
    """A readiness probe: what it waits for (as "waited for ..." reads) and the check."""

    what: str
    check: Callable[[], object]


def file_appears(path: Path) -> Ready:
    return Ready(f"{path.name} to appear", path.exists)


@dataclass
class Helper:
    """A started helper process; `name` is what messages call it ("the congestion controller")."""

    lab: str
    name: str
    proc: subprocess.Popen[bytes]
    log: Path | None
    error: Error = RealizeError
    show: Path | None = None  # the file whose tail explains a failure (default: the log)
    tail_lines: int = TAIL_LINES

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tail(self) -> str:
        shown = self.show or self.log
        if shown is None:
            return "no log"
        try:
            lines = shown.read_text(errors="replace").strip().splitlines()
        except OSError:
            return f"no {shown.name}"
        return f"{shown.name}: " + (" | ".join(lines[-self.tail_lines:]) or "empty")

    def ready_now(self, ready: Ready) -> bool:
        """Whether it is ready; the typed error if it exited without being so."""
        if ready.check():
            return True
        if self.proc.poll() is not None:
            raise self.error(f"{self.name} exited ({self.proc.returncode}) before "
                             f"{ready.what}; {self.tail()}")
        return False

    def wait_ready(self, ready: Ready, timeout_s: float, interval_s: float = 0.02) -> None:
        wait_ready([(self, ready)], timeout_s, interval_s)

    def stop(self) -> None:
        kill_pids([self.pid], self.lab)


def start(lab: str, argv: list[str], *, name: str, log: Path | None, netns_name: str | None = None,
          umask: int = rundirs.HELPER_UMASK, cwd: Path | None = None,
          error: Error = RealizeError) -> Helper:
    """Start one tagged helper (not waited for: `wait_ready`, or `start_ready`). `log`: its
    stdout and stderr, appended to, 0600 (None: discarded)."""
    with contextlib.ExitStack() as stack:
        if netns_name is not None:
            stack.enter_context(netns.entered(netns_name))
        out = stack.enter_context(rundirs.open_private(log)) if log else subprocess.DEVNULL
        proc = subprocess.Popen(argv, env=base_env(lab), cwd=cwd, umask=umask,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # survives the command; `down` stops it
    return Helper(lab, name, proc, log, error)


def start_ready(lab: str, argv: list[str], ready: Ready, timeout_s: float, **how: Any) -> Helper:
    """`start`, then `wait_ready`: the helper once it is ready (killed, and the error, if not)."""
    helper = start(lab, argv, **how)
    helper.wait_ready(ready, timeout_s)
    return helper


def wait_ready(pending: list[tuple[Helper, Ready]], timeout_s: float,
               interval_s: float = 0.02) -> None:
    """Until every helper is ready, all against one deadline. If one exits first, the time
    runs out or anything interrupts, the ones not yet ready are killed by PID, then the
    error (the first not ready's type: what it waited for, its log's last lines)."""
    if not pending:
        return
    left = list(pending)

    def all_ready() -> bool:
        left[:] = [(h, r) for h, r in left if not h.ready_now(r)]
        return not left

    def seen() -> str:
        helper, ready = left[0]
        who = f"{helper.name} " if len(pending) > 1 else ""
        return f"{who}waited for {ready.what}; {helper.tail()}"

    first = pending[0][0]
    try:
        wait_until(all_ready, timeout_s, interval_s, seen=seen, error=first.error,
                   what=", ".join(h.name for h, _ in pending) + " not ready")
    except BaseException:
        kill_pids([h.pid for h, _ in left], first.lab)
        raise


# -- finding a lab's processes and stopping them --------------------------------------

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


Exited = Callable[[int], None]  # told how many of the PIDs have exited so far


def kill_tagged(lab: str, exited: Exited | None = None) -> list[int]:
    """Stop every process carrying this lab's tag (by PID, from /proc); their PIDs."""
    pids = [pid for pid, tag in tagged_processes().items() if tag == lab]
    kill_pids(pids, lab, exited=exited)
    return pids


def kill_pids(pids: list[int], lab: str | None = None, timeout_s: float = 5.0,
              exited: Exited | None = None, at_once: Collection[int] = ()) -> None:
    """SIGTERM the given PIDs, wait up to `timeout_s`, then SIGKILL what is left. Only these
    PIDs, each signalled through a pidfd taken before the first signal (a PID that exits and
    is reused while we wait is never hit), and with `lab` only a process that carries the
    lab's tag, checked before SIGTERM and again before SIGKILL. All are signalled first,
    then waited for together (`exited`: how many have, as they do). Those also in
    `at_once` get SIGKILL at once: nothing their own shutdown does is needed."""
    fds = _pidfds(pids, lab)
    try:
        for pid, fd in fds.items():
            _signal(fd, signal.SIGKILL if pid in at_once else signal.SIGTERM)
        for pid in _wait_exit(fds, timeout_s, exited):
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


def _wait_exit(fds: dict[int, int], timeout_s: float, exited: Exited | None = None) -> list[int]:
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
        if exited is not None:
            exited(len(fds) - len(by_fd))
    return list(by_fd.values())


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
