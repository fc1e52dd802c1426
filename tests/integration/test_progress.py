"""Progress of `up` and `down` through the CLI, stderr not a terminal: a line for each
phase's count (namespaces, links, daemons, routing, reach; processes and namespaces
removed), plain text only, and stdout's JSON untouched by any of it."""

from __future__ import annotations

import json
import os
import re
import subprocess

from .conftest import PREFIX, ROCELAB

TOPO = "topologies/clos-2x4.yaml"  # 6 routers, 8 hosts: 14 namespaces, 16 links, 56 host pairs
EVERY = {"ROCELAB_PROGRESS_EVERY": "1e-9"}  # every update a line: each phase shows, however short


def rocelab(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ROCELAB, *args], capture_output=True, text=True, timeout=300,
                          env=os.environ | (env or {}), stdin=subprocess.DEVNULL)


def final(stderr: str, phase: str) -> str:
    """The last line a phase printed: `[  1.2s] daemons: 6/6 routers started (100%), in 0 s`."""
    lines = [ln for ln in stderr.splitlines() if re.match(rf"\[\s*\d+\.\ds\] {re.escape(phase)}: ", ln)]
    assert lines, f"no progress line for {phase!r} in:\n{stderr}"
    return lines[-1]


def test_up_and_down_show_each_phases_progress_on_stderr_and_json_stays_clean():
    name = f"{PREFIX}progress"
    try:
        up = rocelab("up", TOPO, "--name", name, "--json", env=EVERY)
        assert up.returncode == 0, up.stderr
        assert json.loads(up.stdout)["converged"] is True  # stdout: the JSON and nothing else
        err = up.stderr
        assert "\r" not in err and "\x1b" not in err  # not a terminal: plain lines
        assert ", in " in final(err, "namespaces") and "14/14 created (100%)" in final(err, "namespaces")
        assert "16/16 created (100%)" in final(err, "links")
        assert "6/6 routers started (100%)" in final(err, "daemons")
        assert re.search(r"routing: \d/6 routers converged \(\d+%\), \d+ s(, ETA \d+ s)?, (fib|bgp): \d+ ",
                         err), err
        assert "6/6 routers converged (100%), in " in final(err, "routing")
        assert "routing converged; checking host reachability" in err
        assert "56/56 host pairs answered (100%), in " in final(err, "reach")

        down = rocelab("down", name, "--json", env=EVERY)
        assert down.returncode == 0, down.stderr
        assert json.loads(down.stdout)[0]["namespaces"] == 14
        assert "14/14 removed (100%), in " in final(down.stderr, f"down {name}: namespaces")
        assert re.search(r"(\d+)/\1 exited \(100%\), in ", final(down.stderr, f"down {name}: processes"))
    finally:
        rocelab("down", name, "--quiet")


def test_quiet_up_and_down_print_only_the_result():
    name = f"{PREFIX}quiet"
    try:
        up = rocelab("up", TOPO, "--name", name, "--quiet", env=EVERY)
        assert up.returncode == 0, up.stderr
        assert up.stderr.splitlines() == [up.stderr.splitlines()[0]]  # the summary line only
        assert up.stderr.startswith(f"lab {name} converged in ")
        down = rocelab("down", name, "--quiet", env=EVERY)
        assert (down.returncode, down.stderr) == (0, "")
        assert down.stdout.startswith(f"lab {name}: ")
    finally:
        rocelab("down", name, "--quiet")
