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


def start(plan: Plan, after_s: float) -> int:
    """Start a watchdog that restores STP on every bridge `after_s` seconds from now. Not
    waited for: the storm's timeline must not slip by its start-up (the plan it loads)."""
    return procs.start(plan.lab, [sys.executable, "-m", "emulator.watchdog", "--lab", plan.lab,
                                  "--after", f"{after_s:.3f}"],
                       name="the storm watchdog", log=lab_run_dir(plan.lab) / "watchdog.log").pid


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m emulator.watchdog")
    p.add_argument("--lab", required=True)
    p.add_argument("--after", type=float, required=True, help="seconds until STP goes back on")
    args = p.parse_args(argv)
    plan = state.lab_plan(args.lab)
    time.sleep(max(0.0, args.after))
    bridge.set_stp(plan, True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
