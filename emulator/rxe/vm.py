"""An rxe host: a small QEMU/TCG guest running Linux's Soft-RoCE, wired in as the host.

The guest runs inside the host's namespace. Its NIC is a tap device there, joined to
the namespace's fabric port eth0 as a plain wire: tc ingress on each redirects every
frame out of the other (mirred). The namespace gives its address away (the guest owns
the address and eth0's MAC, so the leaf's pinned neighbour entry stays right), and
nothing on the leaf side changes: shaping, ECN and PFC see the same port. A bridge
would do too, but would put the namespace's own stack on the segment and learn MACs;
mirred is a wire and nothing else.

QEMU and the agent: virtio-serial ports `rocelab.0..N-1`, each a unix socket in the
host's run dir. One client holds a port at a time (a lock file beside it), so up to
PORTS commands (`rocelab exec`, `up`) talk to one guest at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from .. import netns, procs, rundirs
from . import guest, guestfs
from .channel import AgentError, Channel, hello

PORTS = 4
TAP = "rxtap0"
BOOT_TIMEOUT_S = 60.0  # TCG: 3-10 s usually, more on a loaded machine
QEMU = "qemu-system-x86_64"


WIRE_PRIO = 60000  # the tc wire's filter: after the congestion plane's (default 49152)


# QEMU's seccomp filter: no obsolete syscalls, no fork/exec, no scheduler or affinity
# changes. set*uid stays allowed: QEMU 7.2 installs the filter before -runas drops root,
# and elevateprivileges=deny kills it there (SIGSYS, measured); once it runs as
# QEMU_USER (uid, euid and saved uid alike, no capabilities, no_new_privs) there is no
# privilege left to elevate to.
SANDBOX = "on,obsolete=deny,elevateprivileges=allow,spawn=deny,resourcecontrol=deny"
# QEMU drops root for this user once its devices are open (the tap, the 9p exports,
# the agent sockets and the console file): what it serves is then only what this user
# may read, and a guest that breaks out of QEMU is nobody on the host.
QEMU_USER = "nobody"


class VmError(AgentError):
    pass


@dataclass
class RxeVm:
    lab: str
    name: str
    netns: str
    mac: str
    address: str  # 10.1.1.1/31
    gateway: str | None
    mtu: int
    run_dir: Path
    memory_mib: int = 384
    cpus: int = 1
    pid: int | None = None
    boot_s: float | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def console(self) -> Path:
        return self.run_dir / "console.log"

    @property
    def etc(self) -> Path:
        """The guest's /etc (guestfs.build_etc), exported in place of the host's."""
        return self.run_dir / "guest-etc"

    def sock(self, i: int) -> Path:
        return self.run_dir / f"agent{i}.sock"

    # -- lifecycle -----------------------------------------------------------------
    def start(self, timeout_s: float = BOOT_TIMEOUT_S, initrd: Path | None = None) -> None:
        """Boot; return once the agent says hello. VmError naming the host otherwise.
        `initrd`: the initramfs, if the caller has it (boot_all builds it once for all)."""
        kernel = guest.installed()
        if kernel is None:
            raise VmError(f"{self.name}: no guest kernel: run `python -m emulator.rxe.guest fetch`")
        rundirs.make_private_dir(self.run_dir, exist_ok=True)  # root's only (rundirs)
        initrd = initrd or guest.initramfs(kernel, into=self.run_dir / "initramfs.gz")
        guestfs.build_etc(self.etc, self.name)
        t0 = time.monotonic()
        self.wire()
        qemu = procs.start(self.lab, self.qemu_argv(kernel.vmlinuz, initrd),
                           name=f"{self.name}'s QEMU", log=self.run_dir / "qemu.log",
                           netns_name=self.netns, error=VmError,
                           umask=rundirs.PRIVATE_UMASK)  # its agent sockets and files: 0600
        self._proc, self.pid = qemu.proc, qemu.pid
        hello_by = t0 + timeout_s
        qemu.wait_ready(procs.Ready("the agent's hello", lambda: self._hello(hello_by, timeout_s)),
                        timeout_s)
        self.boot_s = time.monotonic() - t0

    def _hello(self, deadline: float, timeout_s: float) -> bool:
        """Once the agent said hello (this blocks); VmError with the console's tail if not by
        `deadline`, or if QEMU exits first."""
        try:
            with self.channel(deadline) as ch:
                hello(ch, deadline)
        except (TimeoutError, OSError, AgentError) as e:
            raise VmError(f"{self.name}: the guest did not come up within {timeout_s:.0f} s "
                          f"({e}); console: {self.console_tail()}") from None
        return True

    def qemu_argv(self, vmlinuz: Path, initrd: Path) -> list[str]:
        import sys

        agent = Path(__file__).resolve().with_name("agent.py")
        # the venv's python by its own name (it finds pyvenv.cfg beside it), its dir
        # resolved: the guest has the exported directories at their real paths only
        python = Path(sys.executable).parent.resolve() / Path(sys.executable).name
        exports = guestfs.exports(self.etc, guest.REPO)
        links, _ = guestfs.top_links()
        cmdline = " ".join([
            "console=ttyS0", "panic=-1", "quiet", "loglevel=4", f"rocelab.name={self.name}",
            f"rocelab.addr={self.address}", f"rocelab.mtu={self.mtu}",
            f"rocelab.python={python}", f"rocelab.agent={agent}",
            *guestfs.cmdline(exports, links),
            *([f"rocelab.gw={self.gateway}"] if self.gateway else [])])
        argv = [QEMU, "-accel", "tcg", "-cpu", "max", "-smp", str(self.cpus),
                "-m", str(self.memory_mib), "-name", f"{self.lab}-{self.name}",
                "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
                "-sandbox", SANDBOX, "-runas", QEMU_USER,
                "-kernel", str(vmlinuz), "-initrd", str(initrd), "-append", cmdline,
                "-serial", f"file:{self.console}",
                "-netdev", f"tap,id=n0,ifname={TAP},script=no,downscript=no",
                "-device", f"virtio-net-pci,netdev=n0,mac={self.mac},romfile=",
                "-device", "virtio-serial-pci"]
        for e in exports:  # forbid: an export never reaches a file system mounted inside it
            argv += ["-fsdev", f"local,id=fs{e.tag},path={e.host},security_model=none,readonly=on,"
                     "multidevs=forbid",
                     "-device", f"virtio-9p-pci,fsdev=fs{e.tag},mount_tag={e.tag}"]
        for i in range(PORTS):
            argv += ["-chardev", f"socket,id=a{i},path={self.sock(i)},server=on,wait=off",
                     "-device", f"virtserialport,chardev=a{i},name=rocelab.{i}"]
        return argv

    def wire(self) -> None:
        """tap <-> eth0 as a wire; the namespace's own address on eth0 goes to the guest."""
        iface = ipaddress.IPv4Interface(self.address)
        with netns.entered(self.netns), IPRoute() as ipr:
            ipr.link("add", ifname=TAP, kind="tuntap", mode="tap", ifr={"no_pi": True, "vnet_hdr": True})
            tap = ipr.link_lookup(ifname=TAP)[0]
            ipr.link("set", index=tap, mtu=self.mtu, state="up")
            eth0 = ipr.link_lookup(ifname="eth0")[0]
            ipr.flush_routes(oif=eth0)
            with contextlib.suppress(Exception):
                ipr.addr("del", index=eth0, address=str(iface.ip), prefixlen=iface.network.prefixlen)
        for a, b in (("eth0", TAP), (TAP, "eth0")):
            # clsact: the congestion plane may have one on eth0 already (tc says "File
            # exists", or on kernels whose add is exclusive "Exclusivity flag on"). Its BPF
            # filter sits at the kernel's default priority (49152) and returns UNSPEC, so
            # the wire goes after it (WIRE_PRIO): the program must see every frame that
            # arrives, or the leaf's bytes held toward this host are never released and
            # its lossless class stays paused for good (measured: rxe stalled in TC 3).
            self._tc(["qdisc", "add", "dev", a, "clsact"], tolerate=("File exists", "Exclusivity flag on"))
            self._tc(["filter", "add", "dev", a, "ingress", "prio", str(WIRE_PRIO), "protocol", "all", "u32",
                      "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", b])

    def _tc(self, args: list[str], tolerate: tuple[str, ...] = ()) -> None:
        done = subprocess.run(["ip", "netns", "exec", self.netns, "tc", *args],
                              capture_output=True, text=True)
        if done.returncode and not any(t in done.stderr for t in tolerate):
            raise VmError(f"{self.name}: tc {' '.join(args)}: {done.stderr.strip()}")

    def console_tail(self, lines: int = 8) -> str:
        try:
            text = self.console.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no console log)"
        return " | ".join(text[-lines:]) or "(empty)"

    def stop(self) -> None:
        if self.pid is not None:
            procs.kill_pids([self.pid], self.lab)
        if self._proc is not None:
            self._proc.wait()

    # -- the agent -----------------------------------------------------------------
    @contextlib.contextmanager
    def channel(self, deadline: float | None = None) -> Iterator[Channel]:
        """A free agent port (its lock held while in use), connected."""
        deadline = deadline or time.monotonic() + 10.0
        while True:
            got = self._connect_free_port()
            if got is not None:
                lock, s = got
                try:
                    with Channel(s) as ch:
                        yield ch
                finally:
                    lock.close()
                return
            if self._proc is not None and self._proc.poll() is not None:
                raise VmError(f"{self.name}: qemu exited ({self._proc.returncode}): "
                              f"{(self.run_dir / 'qemu.log').read_text(errors='replace').strip()[-300:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no agent port of {self.name} answered ({PORTS} in use, or QEMU gone)")
            time.sleep(0.05)

    def _connect_free_port(self) -> tuple[Any, socket.socket] | None:
        for i in range(PORTS):
            lock = open(self.run_dir / f"agent{i}.lock", "w")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                continue
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(str(self.sock(i)))
            except (FileNotFoundError, ConnectionRefusedError):  # QEMU has not made it yet
                s.close()
                lock.close()
                return None
            return lock, s
        return None

    def exec(self, argv: list[str], timeout: float | None = None,
             env: dict[str, str] | None = None) -> tuple[int | None, str, str]:
        with self.channel() as ch:
            r = ch.request("run", wait_s=None if timeout is None else timeout + 10,
                           argv=argv, env=env or {}, timeout=timeout)
        return r["rc"], r["stdout"], r["stderr"]

    def spawn(self, argv: list[str], env: dict[str, str] | None = None) -> int:
        with self.channel() as ch:
            return int(ch.request("spawn", wait_s=30, argv=argv, env=env or {})["job"])

    def wait(self, job: int, timeout: float | None = None) -> int | None:
        with self.channel() as ch:
            r = ch.request("wait", wait_s=None if timeout is None else timeout + 10,
                           job=job, timeout=timeout)
        return r["rc"]

    def kill(self, job: int) -> int | None:
        with self.channel() as ch:
            return ch.request("kill", wait_s=30, job=job)["rc"]

    def read(self, job: int) -> tuple[str, str]:
        with self.channel() as ch:
            r = ch.request("read", wait_s=30, job=job)
        return r["stdout"], r["stderr"]

    def counters(self) -> dict[str, Any]:
        with self.channel() as ch:
            return dict(ch.request("counters", wait_s=30)["counters"])
