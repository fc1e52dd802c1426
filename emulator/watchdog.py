"""The storm demo's hard stop: a process of its own that turns STP back on at a deadline.

    python -m emulator.watchdog --lab LAB --after SECONDS

An experiment that turns STP off on a looped l2 fabric starts one of these
before it does; the runner stops it by PID once it has restored STP itself.
If the runner dies (Ctrl-C twice, SIGKILL, a crash), the watchdog still ends
the storm on time. It carries the lab's tag, so `rocelab down` reaps it too.
"""

from __future__ import annotations

import argparse
import sys
import time

from . import bridge, procs, state
from .paths import lab_run_dir
from .plan import Plan

ARMED = "armed"  # its line once it holds the plan and counts down
START_TIMEOUT_S = 10.0


def start(plan: Plan, after_s: float) -> int:
    """Start a watchdog that restores STP on every bridge `after_s` seconds from now; its PID
    once it is armed (RealizeError, and no watchdog, if it cannot be)."""
    log = lab_run_dir(plan.lab) / "watchdog.log"
    log.unlink(missing_ok=True)  # an earlier storm's "armed" is not this one's
    return procs.start_ready(
        plan.lab, [sys.executable, "-m", "emulator.watchdog", "--lab", plan.lab,
                   "--after", f"{after_s:.3f}"], procs.line_printed(log, ARMED),
        START_TIMEOUT_S, name="the storm watchdog", log=log).pid


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m emulator.watchdog")
    p.add_argument("--lab", required=True)
    p.add_argument("--after", type=float, required=True, help="seconds until STP goes back on")
    args = p.parse_args(argv)
    stop_at = time.monotonic() + max(0.0, args.after)  # from its start, not from armed
    plan = state.lab_plan(args.lab)
    sys.stdout.write(f"{ARMED}\n")
    sys.stdout.flush()
    time.sleep(max(0.0, stop_at - time.monotonic()))  # a timer, not a wait for state
    bridge.set_stp(plan, True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
