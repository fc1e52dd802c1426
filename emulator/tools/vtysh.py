"""The lab's own vtysh on one router: `vtysh --vty_socket DIR --config_dir DIR`, DIR the
router's run dir (frr.vtysh_argv).

Every router's daemons open their vty sockets in /run/rocelab/<lab>/<router>/
(frr.daemon_argv), so pointing vtysh there reaches that router's FRR and
nothing else; without --vty_socket vtysh would talk to the host's own FRR
(/var/run/frr), if any, and without --config_dir `write memory` would write the
host's /etc/frr/frr.conf (Debian's vtysh.conf sets the integrated config). vtysh
talks to unix sockets only, so it runs in the caller's namespace; it carries the
lab's tag like every process a lab starts.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from typing import NoReturn

from ..errors import RocelabError
from ..frr import vtysh_argv
from ..paths import node_run_dir
from ..plan import Plan
from ..procs import base_env
from . import lookup

TIMEOUT_S = 30.0
# What an interactive shell needs from the caller's environment (terminal, history, pager).
INTERACTIVE_ENV = ("TERM", "HOME", "USER", "LOGNAME", "COLUMNS", "LINES", "VTYSH_PAGER")


class VtyshError(RocelabError):
    """vtysh failed; `output` is what it printed before failing (earlier commands' output)."""

    def __init__(self, message: str, output: str = ""):
        super().__init__(message)
        self.output = output


def argv(lab: str, node: str, commands: Sequence[str] = ()) -> list[str]:
    """vtysh bound to one router's vty sockets, with a `-c` per command (none: interactive)."""
    out = vtysh_argv(lab, node)
    for c in commands:
        out += ["-c", c]
    return out


def _ready(plan: Plan, name: str) -> None:
    """The router's daemons have vty sockets to talk to (else vtysh says only 'Exiting')."""
    run_dir = node_run_dir(plan.lab, name)
    if not any(run_dir.glob("*.vty")):
        raise RocelabError(f"{name} in lab {plan.lab} has no vty socket in {run_dir}: are its FRR "
                           f"daemons running? (`rocelab status {plan.lab}`)")


def run(plan: Plan, name: str, commands: Sequence[str], timeout_s: float = TIMEOUT_S) -> str:
    """Run the commands in order on router `name`; return what vtysh printed.

    VtyshError (with the output so far) if vtysh exits non-zero: an unknown or
    failed command stops it there, as it does on the router itself.
    """
    lookup.router(plan, name)
    if not commands:
        raise RocelabError("vtysh: give at least one command (-c CMD), or none for a shell")
    _ready(plan, name)
    try:
        res = subprocess.run(argv(plan.lab, name, commands), capture_output=True, text=True,
                             timeout=timeout_s, env=base_env(plan.lab), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise VtyshError(f"vtysh on {name} did not finish within {timeout_s:g} s: "
                         f"{'; '.join(commands)}") from None
    except FileNotFoundError:
        raise RocelabError("vtysh is not installed (FRR): run `make setup`") from None
    if res.returncode != 0:
        why = last_line(res.stderr) or last_line(res.stdout) or "no output"
        raise VtyshError(f"vtysh on {name} in lab {plan.lab} failed (exit {res.returncode}): {why}",
                         res.stdout)
    return res.stdout


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def interactive_env(lab: str, environ: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """The tagged minimal environment plus what a terminal session needs from the caller's."""
    return base_env(lab) | {k: environ[k] for k in INTERACTIVE_ENV if k in environ}


def shell(plan: Plan, name: str) -> NoReturn:
    """Replace this process with an interactive vtysh on router `name` (it inherits the terminal)."""
    lookup.router(plan, name)
    _ready(plan, name)
    try:
        os.execvpe("vtysh", argv(plan.lab, name), interactive_env(plan.lab, os.environ))
    except FileNotFoundError:
        raise RocelabError("vtysh is not installed (FRR): run `make setup`") from None
