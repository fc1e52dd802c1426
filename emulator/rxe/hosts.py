"""A lab's rxe hosts: each host of `hosts.kind: rxe` as an RxeVm, booted in parallel.

`lab.up` boots them (through the rxe host kind, emulator/hosts/rxe.py) once routing has
converged (the reach check pings from host
namespaces, and an rxe host's namespace gives its address to its guest). Each QEMU
carries the lab's tag, so `down` (and a rolled-back `up`) stops it by PID like any
other lab process; the tap goes with the namespace.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable

from .. import netns, procs, state
from ..paths import lab_run_dir, node_run_dir
from ..plan import Node, Plan
from ..progress import steps
from . import guest
from .vm import RxeVm, VmError

Progress = Callable[[str], None]


# Linux creates rxe devices per network namespace from 7.1 (the rdma tree, 2026);
# before that an rxe device binds only in the kernel's initial namespace.
NETNS_RXE_KERNEL = (7, 1)


def native_path(release: str | None = None, modules: str = "/lib/modules",
                loaded: str = "/sys/module/rdma_rxe") -> tuple[bool, str]:
    """Could this kernel give each host namespace its own rxe? (yes/no, why).

    rocelab boots a guest either way for now: the answer is recorded with the
    lab and printed by `up`, so a user sees which path was taken and why."""
    release = release or os.uname().release
    try:
        version = tuple(int(x) for x in release.split("-")[0].split(".")[:2])
    except ValueError:
        version = (0, 0)
    have = os.path.exists(loaded) or any(
        os.path.exists(os.path.join(modules, release, "kernel/drivers/infiniband/sw/rxe", f))
        for f in ("rdma_rxe.ko", "rdma_rxe.ko.xz", "rdma_rxe.ko.zst"))
    if not have:
        return False, f"kernel {release} has no rdma_rxe module"
    if version < NETNS_RXE_KERNEL:
        return False, (f"kernel {release} binds rxe to its initial network namespace only "
                       "(per-namespace rxe needs Linux 7.1)")
    return True, f"kernel {release} has per-namespace rxe (rocelab still boots guests)"


def vm_for(plan: Plan, host: Node) -> RxeVm:
    port = host.interfaces[0]
    assert port.address, f"{host.name}: an rxe host's NIC has an address (plan)"
    return RxeVm(lab=plan.lab, name=host.name, netns=host.netns, mac=port.mac,
                 address=port.address, gateway=host.gateway, mtu=plan.port_mtu(port),
                 run_dir=node_run_dir(plan.lab, host.name))


def boot_all(plan: Plan, hosts: list[Node], undo: contextlib.ExitStack,
             progress: Progress) -> dict[str, dict[str, float]]:
    """Boot the guests of `hosts` (rxe hosts) at once; {host: {"pid", "boot_s", "rss_mib"}}."""
    if not hosts:
        return {}
    vms = [vm_for(plan, h) for h in hosts]
    _, why = native_path()
    progress(f"rxe hosts as QEMU guests: {why}")
    progress(f"booting {len(vms)} rxe guest{'s' if len(vms) != 1 else ''} "
             f"({', '.join(v.name for v in vms)}; QEMU/TCG, Linux Soft-RoCE)")
    # built (if this content is new) and checked once, not by each guest; booted from
    # the lab's own run dir, not from the cache it was checked in
    initrd = guest.initramfs(into=lab_run_dir(plan.lab) / "initramfs.gz")
    for vm in vms:  # registered before any starts: a failed boot stops the others too
        undo.callback(vm.stop)
    t0 = time.monotonic()
    phase = steps(progress, "rxe guests", len(vms), "booted")

    def boot(vm: RxeVm) -> None:
        vm.start(initrd=initrd)
        phase.advance(detail=f"{vm.name} in {vm.boot_s or 0:.1f} s")

    try:  # netns.parallel: its threads end with their guest, and a rollback joins them
        with phase:
            netns.parallel(boot, vms, workers=len(vms))
    except VmError:
        raise
    except Exception as e:
        raise VmError(str(e)) from e
    progress(f"rxe guests up in {time.monotonic() - t0:.1f} s")
    return {vm.name: {"pid": vm.pid or 0, "boot_s": round(vm.boot_s or 0.0, 2),
                      "rss_mib": round((procs.rss_kib(vm.pid or 0) or 0) / 1024, 1)} for vm in vms}


def running(lab: str) -> dict[str, int]:
    """host -> QEMU PID of a running lab's guests (from the state file)."""
    return {h: int(info["pid"]) for h, info in ((state.read(lab) or {}).get("rxe") or {}).items()}
