"""The exporter `up --metrics ADDR:PORT` starts with a lab, and `down` stops.

A process of its own in the root namespace (python -m emulator.metrics.exporter),
tagged like every lab process, in a session of its own; once it listens it writes
{"pid", "url", "listen"} to <run dir>/exporter.json. `down` stops it by that PID
(and the tag sweep finds it after a crash). Imports nothing heavy: the exporter's
own module (prometheus_client) is loaded only to parse the address.
"""

from __future__ import annotations

import json
import socket
import sys
from typing import Any

from .. import procs
from ..errors import RocelabError
from ..paths import lab_run_dir
from ..plan import Plan

EXPORTER_FILE = "exporter.json"  # in the run dir: {"pid", "url", "listen"} of up --metrics
START_TIMEOUT_S = 30.0  # for the exporter to listen (it starts while the lab is built)


def check_listen(listen: str, expose: bool = False) -> None:
    """The exporter could listen at ADDRESS:PORT now (a local address, a free port), and
    a non-loopback address is asked for (`expose`)."""
    from .exporter import EXPOSE_FLAGS, Listen

    where = Listen.parse(listen)
    where.check_exposure(expose, EXPOSE_FLAGS["up"])
    family = socket.AF_INET6 if ":" in where.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as http.server binds
        try:
            s.bind((where.host, where.port))
        except OSError as e:
            raise RocelabError(f"--metrics {listen}: cannot listen there ({e.strerror or e}); "
                               "give a local address and a free port (port 0: any free one)"
                               ) from None


def start(plan: Plan, listen: str, expose: bool = False) -> procs.Helper:
    """The lab's exporter, started (not waited for: `wait` once the lab is built)."""
    run_dir = lab_run_dir(plan.lab)
    return procs.start(
        plan.lab, [sys.executable, "-m", "emulator.metrics.exporter", "--lab", plan.lab,
                   "--listen", listen, "--ready", str(run_dir / EXPORTER_FILE),
                   *(["--expose"] if expose else [])],
        name="the metrics exporter", log=run_dir / "exporter.log", error=RocelabError)


def listening(exporter: procs.Helper) -> procs.Ready:
    """It announced itself in exporter.json (this exporter: its PID)."""
    def announced() -> bool:
        info = exporter_info(exporter.lab)
        return info is not None and info.get("pid") == exporter.pid

    return procs.Ready(f"its URL in {EXPORTER_FILE}", announced)


def wait(exporter: procs.Helper, timeout_s: float = START_TIMEOUT_S) -> dict[str, Any]:
    """{"pid", "url", "listen"} once the exporter listens; RocelabError with its words
    (the exporter killed) if it exits first or takes too long."""
    exporter.wait_ready(listening(exporter), timeout_s, interval_s=0.05)
    return exporter_info(exporter.lab) or {}


def exporter_info(lab: str) -> dict[str, Any] | None:
    """The lab's exporter as it announced itself (None: the lab was not started with one)."""
    try:
        info = json.loads((lab_run_dir(lab) / EXPORTER_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return info if isinstance(info, dict) else None


def stop(lab: str) -> int | None:
    """Stop the exporter `up --metrics` recorded, by its PID, if that PID is still the
    lab's (its environment carries the lab's tag: a reused PID is left alone)."""
    info = exporter_info(lab)
    pid = info.get("pid") if info else None
    if not isinstance(pid, int) or procs.process_tag(pid) != lab:
        return None
    procs.kill_pids([pid], lab)
    return pid
