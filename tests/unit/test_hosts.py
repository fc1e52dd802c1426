"""Host kinds as plugins, without root: the registry, what each kind answers, the memory
estimate counting rxe guests, and the guests booted on netns.parallel's threads."""

from __future__ import annotations

import contextlib
import threading

import pytest

from emulator import estimate, hosts, netns, workload
from emulator.errors import RocelabError
from emulator.hosts import engine, rxe
from emulator.hosts.perftest import is_engine_host
from emulator.metrics.collectors import BY_NAME
from emulator.plan import compile_plan
from emulator.rxe import guest
from emulator.rxe import hosts as guests
from emulator.rxe.vm import VmError
from emulator.spec import HostKind, parse

BASE = {"name": "t", "spines": 2, "leaves": 4, "hosts": {"per_leaf": 2}}


def plan_with(kind=None):
    spec = BASE if kind is None else BASE | {"hosts": {"per_leaf": 2, "kind": kind}}
    return compile_plan(parse(spec, "t.yaml"), "t.yaml")


def test_every_kind_is_registered_under_its_own_name():
    assert set(hosts.KINDS) == set(HostKind)
    for kind in HostKind:
        assert hosts.for_kind(kind).kind is kind
        assert hosts.for_kind(kind).collector in BY_NAME  # its collector exists


def test_a_host_asks_its_kind():
    plan = plan_with({"prefill1": "rxe", "decode2": "rxe"})
    kinds = {h.name: hosts.kind_of(h) for h in plan.hosts}
    assert [n for n, k in kinds.items() if k is rxe.KIND] == ["prefill1", "decode2"]
    assert all(k is engine.KIND for n, k in kinds.items() if n not in ("prefill1", "decode2"))
    assert all(hosts.kind_of(r) is engine.KIND for r in plan.routers)  # a namespace's default
    p1, d1, d2 = plan.node("prefill1"), plan.node("decode1"), plan.node("decode2")
    assert hosts.for_pair(p1, d1) is rxe.KIND and hosts.for_pair(d1, p1) is rxe.KIND
    assert hosts.for_pair(d1, plan.node("prefill2")) is engine.KIND
    assert hosts.for_pair(p1, d2) is rxe.KIND
    groups = hosts.by_kind(plan.hosts)
    assert [h.name for h in groups[rxe.KIND]] == ["prefill1", "decode2"]


def test_what_each_kind_answers():
    assert (engine.KIND.engine, engine.KIND.serial, engine.KIND.probes_reach) == (True, False, True)
    assert (rxe.KIND.engine, rxe.KIND.serial, rxe.KIND.probes_reach) == (False, True, False)
    plan = plan_with({"prefill1": "rxe"})
    assert not is_engine_host(plan.node("prefill1")) and is_engine_host(plan.node("prefill2"))
    with pytest.raises(RocelabError, match=r"^--src: prefill1 is an rxe host \(Linux Soft-RoCE "
                       r"in a guest\); only `rocelab transfer` and `rocelab kv` drive one: "
                       r"`rocelab exec t prefill1 -- ib_write_bw \.\.\.` runs perftest there$"):
        workload.host(plan, "prefill1")
    assert workload.host(plan, "prefill1", rxe_ok=True) is plan.node("prefill1")


def test_an_rxe_labs_estimate_counts_each_guest():
    plain, mixed, every = plan_with(), plan_with({"prefill1": "rxe", "decode1": "rxe"}), plan_with("rxe")
    base = estimate.estimate(plain)
    assert rxe.KIND.boot_memory_mb == rxe.GUEST_MB >= 300  # ~284 MiB measured after boot
    for plan, guests_ in ((mixed, 2), (every, len(plain.hosts))):
        est = estimate.estimate(plan)
        assert est.memory_mb - base.memory_mb == guests_ * rxe.GUEST_MB
        assert est.processes - base.processes == guests_
        assert (est.namespaces, est.bgp_sessions) == (base.namespaces, base.bgp_sessions)
    assert engine.KIND.boot_memory_mb == 0  # its engine starts with its first transfer
    # 8 guests do not fit where the engine lab does
    room = base.memory_mb / estimate.HEADROOM + 1
    assert estimate.fits(base, room) and not estimate.fits(estimate.estimate(every), room)


class FakeVm:
    def __init__(self, name, started, fail=None):
        self.name, self.started, self.fail = name, started, fail
        self.pid, self.boot_s, self.stopped = None, None, False

    def start(self, initrd):
        self.started.wait()  # every guest boots at once: each waits for all the others
        if self.fail:
            raise self.fail
        self.pid, self.boot_s = 0, 1.0

    def stop(self):
        self.stopped = True


@pytest.fixture
def fake_guests(monkeypatch, tmp_path):
    plan = plan_with("rxe")
    started = threading.Barrier(len(plan.hosts), timeout=10)
    vms = {h.name: FakeVm(h.name, started) for h in plan.hosts}
    monkeypatch.setattr(guests, "vm_for", lambda _plan, h: vms[h.name])
    monkeypatch.setattr(guest, "initramfs", lambda into: tmp_path / "initramfs.gz")
    return plan, vms


def test_guests_boot_at_once_on_parallels_threads(fake_guests):
    plan, vms = fake_guests
    lines: list[str] = []
    with contextlib.ExitStack() as undo:
        booted = hosts.boot(plan, undo, lines.append)
        assert sorted(booted) == sorted(vms) and booted["prefill1"]["boot_s"] == 1.0
        assert not any(t.name.startswith(netns.WORKER_PREFIX) for t in threading.enumerate())
    assert all(vm.stopped for vm in vms.values())  # every stop was registered
    assert lines[-1].startswith("rxe guests up in ")


def test_a_failed_guest_boot_is_one_vm_error(fake_guests):
    plan, vms = fake_guests
    vms["decode1"].fail = OSError("tap busy")
    with contextlib.ExitStack() as undo, pytest.raises(VmError, match="^tap busy$"):
        hosts.boot(plan, undo, lambda _: None)
    assert all(vm.stopped for vm in vms.values())


def test_an_engine_lab_boots_nothing():
    with contextlib.ExitStack() as undo:
        assert hosts.boot(plan_with(), undo, lambda _: None) == {}
