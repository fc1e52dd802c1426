"""Start a lab's congestion controller and wait until its dataplane is in place."""

from __future__ import annotations

import sys

from .. import procs
from ..paths import lab_run_dir
from ..plan import Plan

READY_TIMEOUT_S = 60.0


def start_controller(plan: Plan) -> int:
    """The controller's PID once it wrote controller.ready (its BPF dataplane loaded);
    RealizeError, the controller killed, if it exits first or takes too long."""
    run_dir = lab_run_dir(plan.lab)
    ready = run_dir / "controller.ready"
    ready.unlink(missing_ok=True)
    return procs.start_ready(
        plan.lab, [sys.executable, "-m", "emulator.congestion.controller", "--lab", plan.lab],
        procs.file_appears(ready), READY_TIMEOUT_S, name="the congestion controller",
        log=run_dir / "controller.log").pid
