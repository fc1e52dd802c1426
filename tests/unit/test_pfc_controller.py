"""The PFC controller's reacting path without a lab: what one event sends, what pfc.json
says about the controller, and the reacting thread's scheduling."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.congestion import controller
from emulator.congestion.controller import EVENT, Controller
from emulator.metrics.scrape import load_capture

CAPTURE = Path(__file__).parent / "fixtures" / "metrics" / "clos-2x4-cc-storm"


class Sock:
    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def send(self, data: bytes) -> int:
        self.log.append((self.name, data))
        return len(data)


@pytest.fixture
def ctl(tmp_path):
    plan, _ = load_capture(CAPTURE, source="topologies/clos-2x4-cc.yaml")
    c = Controller(plan)
    c.run_dir = tmp_path
    c.log = []
    for pid in c.ports:  # what setup opens in the namespaces, faked
        c.raw[pid] = Sock(f"raw{pid}", c.log)
        c.switches[pid] = (Sock(f"nl{pid}", c.log), b"PAUSE%d" % pid, b"RESUME%d" % pid)
    return c


def _event(c: Controller, port: int, xoff: int) -> None:
    ts = controller.time.monotonic_ns() - 500_000  # crossed 0.5 ms ago
    buf = ctypes.create_string_buffer(EVENT.pack(ts, port, 3, xoff, 2_000_000))
    c.on_event(0, ctypes.addressof(buf), EVENT.size)


def test_an_xoff_pauses_the_upstream_port_and_an_xon_resumes_and_kicks_it(ctl):
    plan = ctl.plan
    port = plan.node("leaf3").interface(plan.node("decode1").interfaces[0].peer_ifname)
    up = plan.node(port.peer).interface(port.peer_ifname)  # decode1's own port
    _event(ctl, port.port_id, 1)
    assert [n for n, _ in ctl.log] == [f"nl{up.port_id}", f"raw{port.port_id}"]
    assert ctl.log[0][1] == b"PAUSE%d" % up.port_id and ctl.log[1][1][12:14] == b"\x88\x08"
    assert ctl.pauses == 1 and 500 <= ctl.reactions_us[0] < 1e6
    ctl.log.clear()
    _event(ctl, port.port_id, 0)
    assert [n for n, _ in ctl.log] == [f"nl{up.port_id}", f"raw{port.port_id}", f"raw{up.port_id}"]
    assert ctl.log[0][1] == b"RESUME%d" % up.port_id
    assert list(ctl.paused_s) == [f"decode1:{up.name}:3"]


def test_an_event_on_a_port_the_lab_does_not_have_is_ignored(ctl):
    _event(ctl, 4000, 1)
    assert ctl.log == [] and ctl.pauses == 0


def test_pfc_json_says_how_the_controller_runs_and_keeps_the_last_reactions(ctl, monkeypatch):
    monkeypatch.setattr(controller, "REACTION_WINDOW", 5)
    ctl.reactions_us += [10.04, 20.0, 30.0]
    ctl.report()
    first = json.loads((ctl.run_dir / "pfc.json").read_text())
    assert first["reaction_us"] == [10.0, 20.0, 30.0]
    assert first["sched"] == "normal" and first["cpu_s"] > 0
    ctl.reactions_us += [40.0, 50.0, 60.0, 70.0]
    ctl.report()  # only the new ones are encoded; the window keeps the last 5
    assert json.loads((ctl.run_dir / "pfc.json").read_text())["reaction_us"] == [
        30.0, 40.0, 50.0, 60.0, 70.0]


@pytest.mark.skipif(os.geteuid() != 0, reason="SCHED_FIFO needs CAP_SYS_NICE")
def test_the_reacting_thread_runs_sched_fifo_and_its_children_do_not():
    code = ("import os, subprocess, sys\n"
            "from emulator.congestion.controller import prioritise\n"
            "print(prioritise(), os.sched_getscheduler(0) & 0xff == os.SCHED_FIFO)\n"
            "child = subprocess.run([sys.executable, '-c', 'import os; print(os.sched_getscheduler(0))'],"
            " capture_output=True, text=True).stdout.strip()\n"
            "print(child)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=60).stdout.split()
    assert out == [f"fifo:{controller.RT_PRIORITY}", "True", str(os.SCHED_OTHER)]
