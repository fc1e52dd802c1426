"""The guest an rxe host boots: Debian's kernel, a few of its modules, a tiny initramfs.

`fetch` downloads Debian's `linux-image-amd64` dependency (the kernel that ships
rdma_rxe.ko; this machine's kernel has none and cannot load modules) with apt and
keeps only the kernel and the closure of the modules the guest loads, under the
cache (`<repo>/.cache/guest/`, or $ROCELAB_GUEST_DIR). `initramfs` builds a gzip'd
newc cpio in Python (no cpio, no kmod on the host): static busybox, those modules
in load order and an /init that mounts the host's root read-only over virtio-9p
and starts the agent with the host's own Python. It is cached by its content,
and a cached file whose content does not match its name is rebuilt before a boot.

    python -m emulator.rxe.guest fetch     # idempotent; progress on stderr
"""

from __future__ import annotations

import gzip
import hashlib
import lzma
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import RocelabError
from .cpio import Entry, archive

REPO = Path(__file__).resolve().parents[2]
META_PACKAGE = "linux-image-amd64"
BUSYBOX = Path("/bin/busybox")  # busybox-static: runs with no libraries in the initramfs
# What the guest loads (their dependencies follow from each module's own modinfo):
# virtio transport, NIC, agent port, 9p root, Soft-RoCE and the verbs/CM user interfaces.
# crc32_generic: rxe's ICRC asks the crypto API for "crc32" (without it: "failed to add eth0").
WANTED = ("virtio_pci", "virtio_net", "virtio_console", "9pnet_virtio", "9p",
          "crc32_generic", "rdma_rxe", "ib_uverbs", "rdma_ucm")
INIT = Path(__file__).with_name("init.sh")


class GuestError(RocelabError):
    pass


def cache_dir() -> Path:
    import os

    return Path(os.environ.get("ROCELAB_GUEST_DIR", REPO / ".cache" / "guest"))


@dataclass(frozen=True)
class Kernel:
    """A fetched guest kernel: vmlinuz and its modules (flat, `<name>.ko`)."""
    root: Path

    @property
    def vmlinuz(self) -> Path:
        return self.root / "vmlinuz"

    @property
    def modules(self) -> Path:
        return self.root / "modules"

    @property
    def order(self) -> list[str]:
        return (self.root / "modules.order").read_text().split()


def _say(msg: str) -> None:
    print(f"rocelab guest: {msg}", file=sys.stderr, flush=True)


def kernel_package() -> str:
    """The versioned kernel package linux-image-amd64 depends on (apt-cache)."""
    out = subprocess.run(["apt-cache", "depends", META_PACKAGE], capture_output=True, text=True)
    found = re.search(r"Depends:\s*(linux-image-\S+)", out.stdout)
    if out.returncode or not found:
        raise GuestError(f"apt-cache knows no {META_PACKAGE} (run apt-get update?): "
                         f"{(out.stderr or out.stdout).strip()[:200]}")
    return found.group(1)


def installed(cache: Path | None = None) -> Kernel | None:
    """The fetched kernel staged with today's WANTED modules, if any (the newest)."""
    cache = cache or cache_dir()
    found = sorted(p.parent for p in cache.glob("linux-image-*/modules.order")
                   if (p.parent / "wanted").exists()
                   and (p.parent / "wanted").read_text().split() == list(WANTED))
    return Kernel(found[-1]) if found else None


def fetch(cache: Path | None = None, package: str | None = None) -> Kernel:
    """The guest kernel and modules in the cache; downloads only what is missing.

    The .deb stays in the cache: a new module list is staged again from it, offline."""
    cache = cache or cache_dir()
    package = package or kernel_package()
    kernel = Kernel(cache / package)
    wanted = kernel.root / "wanted"
    if wanted.exists() and wanted.read_text().split() == list(WANTED):
        return kernel  # quiet: `make setup` runs this every time
    cache.mkdir(parents=True, exist_ok=True)
    debs = sorted(cache.glob(f"{package}_*.deb"))
    if not debs:
        _say(f"downloading {package} with apt-get")
        got = subprocess.run(["apt-get", "download", "-q", package], cwd=cache,
                             stdout=sys.stderr, stderr=sys.stderr)
        debs = sorted(cache.glob(f"{package}_*.deb"))
        if got.returncode or not debs:
            raise GuestError(f"apt-get download {package} failed (exit {got.returncode})")
    with tempfile.TemporaryDirectory(dir=cache, prefix=".stage-") as tmp:
        _say(f"unpacking {debs[-1].name}")
        subprocess.run(["dpkg-deb", "-x", str(debs[-1]), f"{tmp}/x"], check=True)
        staged = Path(tmp) / "kernel"
        _stage(Path(tmp) / "x", staged)
        if kernel.root.exists():
            shutil.rmtree(kernel.root)
        staged.rename(kernel.root)  # complete or absent
    _say(f"{package}: kernel and {len(kernel.order)} modules in {kernel.root}")
    return kernel


def _stage(unpacked: Path, dest: Path) -> None:
    vmlinuz = sorted((unpacked / "boot").glob("vmlinuz-*"))
    if not vmlinuz:
        raise GuestError(f"no vmlinuz in {unpacked / 'boot'}")
    found = {module_name(p): p for p in (unpacked / "lib" / "modules").rglob("*.ko*")}
    order = load_order(WANTED, {n: depends(p.read_bytes() if p.suffix == ".ko" else _unxz(p))
                                for n, p in found.items()})
    (dest / "modules").mkdir(parents=True)
    shutil.copy(vmlinuz[-1], dest / "vmlinuz")
    for name in order:
        shutil.copy(found[name], dest / "modules" / found[name].name)
    (dest / "modules.order").write_text("\n".join(order) + "\n")
    (dest / "wanted").write_text("\n".join(WANTED) + "\n")  # what this staging was for


def module_name(path: Path) -> str:
    """rdma_rxe.ko, rdma_rxe.ko.xz -> rdma_rxe (the kernel treats - and _ alike)."""
    return path.name.split(".ko")[0].replace("-", "_")


def _unxz(path: Path) -> bytes:
    return lzma.decompress(path.read_bytes())


def depends(ko: bytes) -> list[str]:
    """The `depends=` of a module's .modinfo (what modules.dep would say)."""
    m = re.search(rb"(?:^|\x00)depends=([^\x00]*)", ko)
    if not m or not m.group(1):
        return []
    return [d.decode().replace("-", "_") for d in m.group(1).split(b",") if d]


def load_order(wanted: tuple[str, ...] | list[str], deps: dict[str, list[str]]) -> list[str]:
    """Every wanted module and what it needs, each after its dependencies."""
    order: list[str] = []
    seen: set[str] = set()

    def visit(name: str, chain: tuple[str, ...]) -> None:
        if name in seen:
            return
        if name not in deps:
            why = f" (needed by {chain[-1]})" if chain else ""
            raise GuestError(f"module {name} not in the guest kernel{why}")
        if name in chain:
            raise GuestError(f"module dependency cycle: {' -> '.join(chain + (name,))}")
        for dep in deps[name]:
            visit(dep, chain + (name,))
        seen.add(name)
        order.append(name)

    for name in wanted:
        visit(name, ())
    return order


def initramfs_entries(kernel: Kernel, busybox: bytes, init: str) -> list[Entry]:
    """The initramfs: /init, busybox, the modules (plain .ko) and their load order."""
    entries = [Entry.dir(d) for d in ("bin", "dev", "proc", "sys", "newroot", "lib", "lib/modules")]
    entries.append(Entry.char("dev/console", 5, 1, 0o600))
    entries.append(Entry.file("bin/busybox", busybox, 0o755))
    entries.append(Entry.symlink("bin/sh", "busybox"))
    entries.append(Entry.file("init", init.encode(), 0o755))
    names = []
    for path in sorted(kernel.modules.iterdir()):
        data = _unxz(path) if path.suffix == ".xz" else path.read_bytes()
        entries.append(Entry.file(f"lib/modules/{module_name(path)}.ko", data, 0o644))
        names.append(module_name(path))
    order = [n for n in kernel.order if n in names]
    entries.append(Entry.file("modules.order", ("\n".join(order) + "\n").encode(), 0o644))
    return entries


def initramfs(kernel: Kernel | None = None, cache: Path | None = None,
              into: Path | None = None) -> Path:
    """The guest's initramfs (gzip'd newc cpio), built once per content. With `into`
    (a file in a run dir only root writes), the checked bytes are written there and that
    path returned: the cache, whoever can write it, cannot be swapped between the check
    and QEMU reading the file."""
    cache = cache or cache_dir()
    kernel = kernel or installed(cache)
    if kernel is None:
        raise GuestError(f"no guest kernel in {cache}: run `python -m emulator.rxe.guest fetch` "
                         "(or `make setup`)")
    if not BUSYBOX.exists():
        raise GuestError(f"{BUSYBOX} missing: apt-get install busybox-static")
    data = archive(initramfs_entries(kernel, BUSYBOX.read_bytes(), INIT.read_text()))
    digest = hashlib.sha256(data).hexdigest()
    path = cache / f"initramfs-{digest[:16]}.gz"
    packed = checked(path, digest)
    if packed is None:  # absent, or not what its name says: never boot it
        packed = gzip.compress(data, compresslevel=1, mtime=0)
        # one temporary file per writer: guests boot in parallel, and two building at
        # once through one name replaced each other's half-written file
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(packed)
        tmp.replace(path)
    if into is None:
        return path
    into.write_bytes(packed)
    return into


def checked(path: Path, digest: str) -> bytes | None:
    """A cached initramfs's bytes if its archive's sha256 is `digest` (None: missing,
    not gzip, or another content). The cache is trusted by content, not by name."""
    try:
        packed = path.read_bytes()
        return packed if unpacked_digest(packed) == digest else None
    except (FileNotFoundError, gzip.BadGzipFile, EOFError, zlib.error):
        return None


def unpacked_digest(packed: bytes) -> str:
    """sha256 of the archive inside a gzip'd initramfs."""
    return hashlib.sha256(gzip.decompress(packed)).hexdigest()


def main(argv: list[str]) -> int:
    if argv[:1] != ["fetch"]:
        print("usage: python -m emulator.rxe.guest fetch", file=sys.stderr)
        return 64
    try:
        kernel = fetch()
        initramfs(kernel)  # built now, not at the first boot
    except RocelabError as e:
        print(f"rocelab guest: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
