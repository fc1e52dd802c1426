"""Named network namespaces, without forking and without `ip netns exec`.

A named namespace is a file under /run/netns bind-mounted onto a namespace
handle, exactly as iproute2 makes it, so `ip netns` and every other tool
sees the lab. We create and enter namespaces per *thread* (setns(2) and
unshare(CLONE_NEWNET) act on the calling thread only), which lets one
process build many namespaces in parallel and open sockets inside them.
A socket stays in the namespace it was created in, so netlink, raw ICMP and
sysctl handles can be opened once and then used from any thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")
WORKERS = 4  # netlink is serialised by the kernel's RTNL lock; a few threads hide syscall latency

NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_SHARED = 1 << 20
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_void_p]
_shared_lock = threading.Lock()
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def setns(fd: int) -> None:
    """Move the calling thread into the network namespace behind `fd`."""
    _check(_libc.setns(fd, CLONE_NEWNET), "setns")


def path(name: str) -> Path:
    return NETNS_DIR / name


def exists(name: str) -> bool:
    return path(name).exists()


def list_names() -> list[str]:
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir())
    except FileNotFoundError:
        return []


def _ensure_shared_dir() -> None:
    """Make /run/netns a shared mount point once, as `ip netns add` does."""
    with _shared_lock:
        NETNS_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
        with open("/proc/self/mountinfo") as f:
            if any(line.split()[4] == str(NETNS_DIR) for line in f):
                return
        d = str(NETNS_DIR).encode()
        _check(_libc.mount(d, d, b"none", MS_BIND | MS_REC, None), "bind /run/netns")
        _check(_libc.mount(b"", d, b"none", MS_SHARED | MS_REC, None), "share /run/netns")


def create(name: str, init: Callable[[], None] | None = None) -> None:
    """Create the named namespace; the calling thread's namespace is unchanged.

    `init` runs inside the new namespace *before* it is published under
    /run/netns, so whatever it tags is there as soon as anyone can see it.
    """
    _ensure_shared_dir()
    target = path(name)
    if target.exists():
        raise FileExistsError(errno.EEXIST, "namespace exists", name)
    with _restore_netns():
        _check(_libc.unshare(CLONE_NEWNET), "unshare")
        if init:
            init()
        fd = os.open(target, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0)
        os.close(fd)
        src = f"/proc/self/task/{threading.get_native_id()}/ns/net"
        if _libc.mount(src.encode(), str(target).encode(), b"none", MS_BIND, None) != 0:
            err = ctypes.get_errno()
            target.unlink(missing_ok=True)
            raise OSError(err, f"bind {target}: {os.strerror(err)}")


def remove(name: str) -> bool:
    """Unmount and delete a named namespace. Returns False if it was not there."""
    target = path(name)
    if not target.exists():
        return False
    if _libc.umount2(str(target).encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOENT):  # EINVAL: not a mount point
            raise OSError(err, f"umount {target}: {os.strerror(err)}")
    target.unlink(missing_ok=True)
    return True


@contextlib.contextmanager
def _restore_netns() -> Iterator[None]:
    own = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    try:
        yield
    finally:
        try:
            setns(own)
        finally:
            os.close(own)


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    """Run the body with the calling thread inside namespace `name`."""
    fd = os.open(path(name), os.O_RDONLY)
    try:
        with _restore_netns():
            setns(fd)
            yield
    finally:
        os.close(fd)


def open_fd(name: str) -> int:
    return os.open(path(name), os.O_RDONLY)



CLONE_NEWNS = 0x00020000
MS_SLAVE = 1 << 19


def exec_in(name: str, argv: list[str], env: dict[str, str],
            hide: dict[str, str | None] | None = None) -> None:
    """Replace this process with argv running inside namespace `name`.

    Like `ip netns exec`: a private mount namespace with /sys remounted, so
    tools that read /sys/class/net see the namespace's own interfaces. The
    host's mounts are untouched (our copy is made a slave first). `hide` maps
    a host directory to what covers it in that private view: another directory
    (bind-mounted over it) or None (an empty tmpfs) -- e.g. the host's
    /run/frr, so a plain `vtysh` reaches the lab's FRR, never the host's.
    """
    fd = open_fd(name)
    setns(fd)
    os.close(fd)
    _check(_libc.unshare(CLONE_NEWNS), "unshare mount namespace")
    _check(_libc.mount(b"none", b"/", None, MS_SLAVE | MS_REC, None), "make / slave")
    if _libc.umount2(b"/sys", MNT_DETACH) == 0:
        _check(_libc.mount(b"sysfs", b"/sys", b"sysfs", 0, None), "mount /sys")
    for target, source in (hide or {}).items():
        if not os.path.isdir(target):
            continue  # nothing on the host to reach there
        if source is None:
            _check(_libc.mount(b"tmpfs", target.encode(), b"tmpfs", 0, b"size=64k"),
                   f"cover {target}")
        else:
            _check(_libc.mount(source.encode(), target.encode(), None, MS_BIND, None),
                   f"bind {source} over {target}")
    os.execvpe(argv[0], argv, env)


WORKER_PREFIX = "rocelab-parallel"
WORKER_START_S = 5.0  # a thread begins within microseconds of Thread.start(), or never


def parallel(fn: Callable[[T], R], items: Iterable[T], workers: int = WORKERS) -> list[R]:
    """Run fn over items on `workers` threads; re-raise the first failure (in item order),
    once every worker has stopped; after a failure no further item starts.

    Not a ThreadPoolExecutor: its idle workers wait for work until the pool is shut down
    or collected, and a KeyboardInterrupt can cut the shutdown (or a Thread.start) short,
    leaving workers no one waits for, or that wait forever. These take items until none
    are left or one failed, then end on their own, so `join_workers` always returns."""
    todo = list(enumerate(items))
    count = len(todo)
    results: dict[int, R] = {}
    failures: dict[int, BaseException] = {}
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                if not todo or failures:
                    return
                i, item = todo.pop(0)
            try:
                results[i] = fn(item)
            except BaseException as e:  # handed to the caller below
                with lock:
                    failures[i] = e

    threads = [threading.Thread(target=work, name=f"{WORKER_PREFIX}-{n}")
               for n in range(min(workers, len(todo)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[min(failures)]
    return [results[i] for i in range(count)]


def join_workers() -> None:
    """Wait for every `parallel` worker thread still running. A KeyboardInterrupt in the
    calling thread (inside Thread.start() or join()) leaves workers running that may still
    be creating a namespace (or starting a daemon) whose undo a rollback must not miss.
    Workers end once their items are done."""
    me = threading.current_thread()
    for t in threading.enumerate():  # started ones, and those still inside Thread.start()
        if t is me or not t.name.startswith(WORKER_PREFIX):
            continue
        started = getattr(t, "_started", None)  # set by the new thread as it begins
        if started is not None and not started.wait(WORKER_START_S):
            continue  # the signal came before the thread did: it never runs anything
        t.join()
