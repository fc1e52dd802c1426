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
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import netns, rundirs
from .errors import FrrConfigError, RealizeError, RocelabError
from .paths import FRR_BIN_DIR, lab_run_dir, node_run_dir
from .plan import Node, Plan
from .procs import base_env
from .render import Rendered, UserConfig, daemons_for
from .waiting import wait_until

FRR_USER = "frr"
ZSERV = "zserv.api"
START_TIMEOUT_S = 10.0
VTYSH_TIMEOUT_S = 10.0
# vtysh's own file in a router's run dir (its --config_dir): `write memory` saves the
# running config into the run dir's frr.conf, as it would on a router with Debian's FRR.
VTYSH_CONF = "vtysh.conf"
VTYSH_CONF_TEXT = "service integrated-vtysh-config\n"


@dataclass(frozen=True)
class Daemon:
    node: str
    name: str
    pid: int


def prepare_run_dirs(plan: Plan, rendered: Rendered) -> None:
    """Write configs into per-node run dirs that user `frr` can use.

    FRR drops privileges to `frr`, so its dirs are owned by frr (0700) and it must pass
    through every parent: the lab's dir lets group frr through (0710 root:frr), the run
    root and above must let others through and are checked, never chmodded (rundirs).
    The configs (a snippet may hold a BGP password) are 0640 frr:frr.
    """
    try:
        uid, gid = pwd.getpwnam(FRR_USER).pw_uid, grp.getgrnam(FRR_USER).gr_gid
    except KeyError:
        raise RealizeError("user 'frr' does not exist: is FRR installed? (make setup)") from None
    lab_dir = lab_run_dir(plan.lab)
    rundirs.make_dirs(lab_dir.parent, rundirs.RUN_ROOT_MODE)
    rundirs.make_private_dir(lab_dir, exist_ok=True)
    if plan.frr_nodes:  # (an L2 lab runs no FRR: its dir stays 0700 root)
        rundirs.share_with_frr(lab_dir)
    for node in plan.frr_nodes:
        d = node_run_dir(plan.lab, node.name)
        rundirs.make_private_dir(d, exist_ok=True)
        os.chown(d, uid, gid)
        texts = dict(rendered.files[node.name]) | {VTYSH_CONF: VTYSH_CONF_TEXT}
        texts.update({u.file: u.text for u in rendered.user.get(node.name, ())})
        for name, text in texts.items():
            f = d / name
            f.write_text(text)
            os.chmod(f, rundirs.FRR_FILE_MODE)
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
    with netns.entered(node.netns), rundirs.open_private(d / f"{daemon}.out", append=False) as out:
        return subprocess.Popen(
            daemon_argv(plan, node, daemon), env=base_env(plan.lab), cwd=d,
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)  # survive the CLI; reaped by `down`


Started = Callable[[int, int], None]  # (routers with every daemon started, zebras started)


def _nobody(routers: int, zebras: int) -> None:
    pass


def start_all(plan: Plan, started: list[Daemon], tell: Started = _nobody) -> float:
    """Start every router's daemons, appending each to `started` as soon as it exists;
    `tell` how many routers have all their daemons started, and zebras (progress: a
    spawn takes ~0.1 s on a loaded machine, 264 of them a minute).

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
        tell(0, len(waiting))

    def zebras_up() -> bool:
        for name, proc in list(waiting.items()):
            if (node_run_dir(plan.lab, name) / ZSERV).exists():
                del waiting[name]
                node = plan.node(name)
                for daemon in daemons_for(plan, node)[1:]:
                    started.append(Daemon(name, daemon, _spawn(plan, node, daemon).pid))
                tell(len(plan.frr_nodes) - len(waiting), len(plan.frr_nodes))
            elif proc.poll() is not None:
                raise RealizeError(f"zebra on {name} exited with status {proc.returncode} at "
                                   f"start (see {node_run_dir(plan.lab, name)}/zebra.out)")
        return not waiting

    wait_until(zebras_up, START_TIMEOUT_S, 0.002, what="zebra did not open its socket",
               seen=lambda: "on " + ", ".join(sorted(waiting)), error=RealizeError)
    return time.process_time() - cpu0


def vtysh_argv(lab: str, node: str) -> list[str]:
    """vtysh confined to one router's run dir: its daemons' vty sockets, and its config
    directory. Without --config_dir vtysh reads /etc/frr/vtysh.conf (Debian's sets
    `service integrated-vtysh-config`) and `write memory` writes the host's
    /etc/frr/frr.conf; with it, the router's own frr.conf (and frr.conf.sav) there."""
    d = str(node_run_dir(lab, node))
    return ["vtysh", "--vty_socket", d, "--config_dir", d]


def vtysh(lab: str, node: str, command: str, daemon: str | None = None) -> str:
    argv = vtysh_argv(lab, node)
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


# -- the user's own configuration ------------------------------------------------------

_NOISE = re.compile(r"^% \[\w+\] Unknown command: XFRR_|^\s*$")  # vtysh -f's end-of-file chatter


def rejected(node: str, what: str, text: str, stdout: str, stderr: str, code: int) -> str:
    """One line from what `vtysh -f` printed when FRR refused a line of `text`:
    `leaf1: FRR rejected line 3 of the overrides frr snippet: "route-map X permt 10":
    % Unknown command`. vtysh names the line on stderr; a daemon that refused a command
    it parsed says why on stdout."""
    m = re.search(r"^line (\d+): (.*)$", stderr, re.MULTILINE)
    said = [ln.strip() for ln in stdout.splitlines() if not _NOISE.match(ln)]
    if not m:
        why = (stderr.strip().splitlines() or said or [f"vtysh exit {code}"])[-1]
        return f"{node}: FRR rejected {what}: {' '.join(why.split())}"
    n, rest = int(m.group(1)), m.group(2)
    lines = text.splitlines()
    line = lines[n - 1].strip() if 0 < n <= len(lines) else ""
    parsed = re.match(r"(%.*?)\[\d+\]: ", rest)  # % Unknown command[4]: <the line>
    if parsed:
        why = parsed.group(1).strip()
    elif said:  # Failure to communicate[13] to bgpd, line: ... -- bgpd's reason is on stdout
        why = said[0]
    else:
        why = rest
    return f'{node}: FRR rejected line {n} of {what}: "{line}": {" ".join(why.split())}'


def _user_checks(plan: Plan, rendered: Rendered) -> list[tuple[str, UserConfig]]:
    """What FRR's parser should see before anything exists: every router's user
    configuration and, with --templates, every daemon file rendered from them."""
    out = [(name, u) for name, pieces in rendered.user.items() for u in pieces]
    if rendered.templates:
        for node in plan.frr_nodes:
            out += [(node.name, UserConfig(f"{name} (rendered from --templates "
                                           f"{rendered.templates})", text, name))
                    for name, text in rendered.files[node.name].items() if name != "frr.conf"]
    return out


def check_user_configs(plan: Plan, rendered: Rendered) -> None:
    """`vtysh -C` (FRR's own parser, no daemon involved) over the user's configuration:
    FrrConfigError (exit 2) naming the router, the line and FRR's message, before the
    first namespace exists. It catches what does not parse; what parses but a daemon
    refuses (a neighbor that does not exist) is found when it is applied."""
    checks = _user_checks(plan, rendered)
    if not checks:
        return

    def one(item: tuple[str, UserConfig]) -> str | None:
        node, u = item
        with tempfile.NamedTemporaryFile("w", prefix="rocelab-", suffix=".conf") as f:
            f.write(u.text)
            f.flush()
            try:
                res = subprocess.run(["vtysh", "-C", "-f", f.name], capture_output=True,
                                     text=True, timeout=VTYSH_TIMEOUT_S, stdin=subprocess.DEVNULL,
                                     env={"PATH": base_env(plan.lab)["PATH"], "LANG": "C.UTF-8"})
            except FileNotFoundError:
                raise RocelabError("vtysh is not installed (FRR): run `make setup`") from None
        return None if res.returncode == 0 else rejected(node, u.what, u.text, res.stdout,
                                                         res.stderr, res.returncode)

    bad = [m for m in netns.parallel(one, checks) if m]
    if bad:
        raise FrrConfigError(str(bad[0]))


def _wait_vty(plan: Plan, nodes: list[Node]) -> None:
    """Until every daemon of these routers has its vty socket (vtysh skips a daemon without)."""
    want = [node_run_dir(plan.lab, n.name) / f"{daemon}.vty"
            for n in nodes for daemon in daemons_for(plan, n)]

    def missing() -> str:
        gone = [p for p in want if not p.exists()]
        return ", ".join(f"{p.parent.name}: {p.name}" for p in gone) + (
            f" (see {gone[0].parent}/*.out)" if gone else "")

    wait_until(lambda: all(p.exists() for p in want), START_TIMEOUT_S, 0.005,
               what="FRR's vty sockets did not all appear", seen=missing, error=RealizeError)


PROMPT = re.compile(r"^[^\s#]+(\([^)]*\))?# (.*)$")  # what `vtysh -E` echoes before each command
MAX_ARG = 64 * 1024  # bytes per -c argument (Linux: 128 KiB per argument)


def config_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of each command in a configuration text: no blanks or comments."""
    return [(i, ln) for i, ln in enumerate(text.splitlines(), 1)
            if ln.strip() and not ln.lstrip().startswith(("!", "#"))]


def refused_by(node: str, what: str, commands: list[tuple[int, str]], stdout: str,
               stderr: str, code: int) -> str:
    """One line from `vtysh -E -c` output: it echoes each command after its prompt and
    stops at the first one FRR refuses, printing FRR's reason after it."""
    out = stdout.splitlines()
    echoed = [i for i, ln in enumerate(out) if PROMPT.match(ln)]
    said = [ln.strip() for ln in out[echoed[-1] + 1:] if ln.strip()] if echoed else []
    why = " ".join(" ".join(said + stderr.split()).split()) or f"vtysh exit {code}"
    k = len(echoed) - 2  # the first echo is `configure terminal`
    if 0 <= k < len(commands):
        n, line = commands[k]
        return f'{node}: FRR rejected line {n} of {what}: "{line.strip()}": {why}'
    return f"{node}: FRR rejected {what}: {why}"


def apply_file(plan: Plan, node: Node, u: UserConfig) -> None:
    """Apply one piece of user configuration to a running router, command by command
    (`vtysh -E -c`, not `-f`: a file read brackets the commands in a configuration
    transaction during which bgpd holds back every peer the file creates, for a second
    and then its start backoff: ~4 s more before sessions come up). FrrConfigError (live:
    exit 5) naming the line and FRR's reason at the first command FRR refuses."""
    commands = config_lines(u.text)
    if not commands:
        return
    argv = [*vtysh_argv(plan.lab, node.name), "-E"]
    chunk = ["configure terminal"]
    for _, line in commands:
        if sum(len(c) + 1 for c in chunk) + len(line) > MAX_ARG:
            argv += ["-c", "\n".join(chunk)]
            chunk = []
        chunk.append(line)
    argv += ["-c", "\n".join(chunk)]
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=VTYSH_TIMEOUT_S,
                             env=base_env(plan.lab), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise FrrConfigError(f"{node.name}: applying {u.what} did not finish within "
                             f"{VTYSH_TIMEOUT_S:.0f} s", live=True) from None
    if res.returncode != 0:
        raise FrrConfigError(refused_by(node.name, u.what, commands, res.stdout, res.stderr,
                                        res.returncode), live=True)


def apply_user_configs(plan: Plan, rendered: Rendered) -> None:
    """Once each router's daemons are up, its user configuration in order (a frr_configs
    file, then the overrides snippet; copies of both are in its run dir, to look at)."""
    _wait_vty(plan, [plan.node(name) for name in rendered.user])

    def one(name: str) -> None:
        node = plan.node(name)
        for u in rendered.user[name]:
            apply_file(plan, node, u)

    netns.parallel(one, sorted(rendered.user))
