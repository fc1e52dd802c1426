"""`up` of rxe hosts: guests booted so far, as each guest's boot ends (no QEMU: fake VMs)."""

from __future__ import annotations

import contextlib
import threading

from emulator.rxe import hosts as rxe_hosts


class FakeVm:
    def __init__(self, name: str, gate: threading.Barrier) -> None:
        self.name, self.pid, self.boot_s, self.gate = name, 0, None, gate

    def start(self, initrd=None) -> None:
        self.gate.wait(5)  # every guest boots at once, as boot_all starts them
        self.boot_s = 3.5

    def stop(self) -> None:
        pass


def test_each_guest_booted_is_counted(monkeypatch, tmp_path):
    gate = threading.Barrier(3)
    vms = {}
    monkeypatch.setattr(rxe_hosts, "vm_for", lambda plan, h: vms.setdefault(h, FakeVm(h, gate)))
    monkeypatch.setattr(rxe_hosts.guest, "initramfs", lambda into: tmp_path / "initramfs.gz")
    monkeypatch.setattr(rxe_hosts, "lab_run_dir", lambda lab: tmp_path)

    class Plan:
        lab = "xc-rxe"

    lines: list[str] = []
    with contextlib.ExitStack() as undo:
        booted = rxe_hosts.boot_all(Plan(), ["h1", "h2", "h3"], undo, lines.append)  # type: ignore[arg-type]
    assert sorted(booted) == ["h1", "h2", "h3"]
    counts = [ln.split(",")[0] for ln in lines if ln.startswith("rxe guests:")]
    assert counts[0] == "rxe guests: 1/3 booted (33%)" and counts[-1] == "rxe guests: 3/3 booted (100%)"
    assert any(ln.startswith("rxe guests: 3/3 booted (100%), in ") for ln in lines)
    assert lines[-1].startswith("rxe guests up in ")
