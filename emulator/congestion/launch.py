"""Start a lab's congestion controller and wait until its dataplane is in place."""

from __future__ import annotations

import subprocess
import sys
import time

from ..errors import RealizeError
from ..paths import lab_run_dir
from ..plan import Plan
from ..rundirs import HELPER_UMASK, open_private
from ..state import base_env

READY_TIMEOUT_S = 60.0


def start_controller(plan: Plan) -> int:
    run_dir = lab_run_dir(plan.lab)
    ready = run_dir / "controller.ready"
    ready.unlink(missing_ok=True)
    with open_private(run_dir / "controller.log") as log:  # its files: root's only (umask)
        proc = subprocess.Popen([sys.executable, "-m", "emulator.congestion.controller",
                                 "--lab", plan.lab], env=base_env(plan.lab), stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                umask=HELPER_UMASK)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready.exists():
        if proc.poll() is not None:
            tail = (run_dir / "controller.log").read_text().strip().splitlines()[-1:]
            raise RealizeError(f"congestion controller failed: {tail[0] if tail else proc.returncode}")
        if time.monotonic() > deadline:
            proc.kill()
            raise RealizeError(f"congestion controller not ready within {READY_TIMEOUT_S:.0f} s")
        time.sleep(0.02)
    return proc.pid
