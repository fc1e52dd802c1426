"""The few libbpf calls rocelab needs, through ctypes (pyroute2 attaches by fd
but cannot load objects or read maps). libbpf 1.x, as Debian/Ubuntu ship it."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import subprocess
from functools import lru_cache
from pathlib import Path

from ..errors import RocelabError

RingCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class BpfError(RocelabError):
    pass


@lru_cache(maxsize=1)
def lib() -> ctypes.CDLL:
    name = ctypes.util.find_library("bpf") or "libbpf.so.1"
    try:
        so = ctypes.CDLL(name, use_errno=True)
    except OSError:
        raise BpfError("libbpf is not installed (apt: libbpf1 / libbpf-dev): run `make setup`") from None
    vp, i, u32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32
    sigs = {
        "bpf_object__open_file": (vp, [ctypes.c_char_p, vp]),
        "bpf_object__load": (i, [vp]),
        "bpf_object__close": (None, [vp]),
        "bpf_object__find_program_by_name": (vp, [vp, ctypes.c_char_p]),
        "bpf_program__fd": (i, [vp]),
        "bpf_object__find_map_by_name": (vp, [vp, ctypes.c_char_p]),
        "bpf_map__fd": (i, [vp]),
        "bpf_map_update_elem": (i, [i, vp, vp, ctypes.c_uint64]),
        "bpf_map_lookup_elem": (i, [i, vp, vp]),
        "bpf_map_get_fd_by_id": (i, [u32]),
        "bpf_obj_get_info_by_fd": (i, [i, vp, ctypes.POINTER(u32)]),
        "ring_buffer__new": (vp, [i, RingCallback, vp, vp]),
        "ring_buffer__poll": (i, [vp, i]),
        "ring_buffer__free": (None, [vp]),
        "libbpf_get_error": (ctypes.c_long, [vp]),
    }
    for fn, (res, args) in sigs.items():
        f = getattr(so, fn)
        f.restype, f.argtypes = res, args
    return so


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = -ret if ret != -1 else ctypes.get_errno()
        raise BpfError(f"{what}: {os.strerror(err)}")
    return ret


def _multiarch() -> str:
    """x86_64-linux-gnu and friends: where Debian/Ubuntu keep asm/types.h."""
    import platform
    import sysconfig

    return (sysconfig.get_config_var("MULTIARCH")
            or next((str(p.name) for p in Path("/usr/include").glob(f"{platform.machine()}-linux-*")),
                    f"{platform.machine()}-linux-gnu"))


def compile_object(source: Path, out: Path) -> Path:
    """clang -target bpf; the multiarch include dir holds asm/types.h on Debian/Ubuntu."""
    multiarch = _multiarch()
    argv = ["clang", "-O2", "-g", "-target", "bpf", f"-I/usr/include/{multiarch}", "-c",
            str(source), "-o", str(out)]
    try:
        res = subprocess.run(argv, capture_output=True, text=True)
    except FileNotFoundError:
        raise BpfError("clang is not installed: run `make setup`") from None
    if res.returncode != 0:
        raise BpfError(f"compiling {source.name} failed: {res.stderr.strip()[:400]}")
    return out


class BpfObject:
    """A loaded BPF object: programs and maps by name, as fds."""

    def __init__(self, path: Path):
        self._obj = lib().bpf_object__open_file(str(path).encode(), None)
        if not self._obj or lib().libbpf_get_error(self._obj):
            raise BpfError(f"cannot open BPF object {path}")
        _check(lib().bpf_object__load(self._obj), f"loading {path.name} (verifier)")

    def prog_fd(self, name: str) -> int:
        prog = lib().bpf_object__find_program_by_name(self._obj, name.encode())
        if not prog:
            raise BpfError(f"no BPF program {name}")
        return _check(lib().bpf_program__fd(prog), f"program {name}")

    def map_fd(self, name: str) -> int:
        m = lib().bpf_object__find_map_by_name(self._obj, name.encode())
        if not m:
            raise BpfError(f"no BPF map {name}")
        return _check(lib().bpf_map__fd(m), f"map {name}")

    def close(self) -> None:
        lib().bpf_object__close(self._obj)


def update(fd: int, key: int, value: bytes) -> None:
    k = ctypes.c_uint32(key)
    buf = ctypes.create_string_buffer(value, len(value))
    _check(lib().bpf_map_update_elem(fd, ctypes.byref(k), buf, 0), "map update")


def lookup(fd: int, key: int, size: int) -> bytes:
    """An array map's entry `key` (its value `size` bytes)."""
    k = ctypes.c_uint32(key)
    buf = ctypes.create_string_buffer(size)
    _check(lib().bpf_map_lookup_elem(fd, ctypes.byref(k), buf), "map lookup")
    return buf.raw


def map_id(fd: int) -> int:
    info = (ctypes.c_uint32 * 32)()  # struct bpf_map_info starts: type, id, ...
    size = ctypes.c_uint32(ctypes.sizeof(info))
    _check(lib().bpf_obj_get_info_by_fd(fd, info, ctypes.byref(size)), "map info")
    return int(info[1])


def map_fd_by_id(ident: int) -> int:
    return _check(lib().bpf_map_get_fd_by_id(ident), f"map id {ident}")


def mmap_array(fd: int, size: int, writable: bool = False) -> mmap.mmap:
    """Map a BPF_F_MMAPABLE array into this process: stats reads cost no syscalls."""
    prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
    return mmap.mmap(fd, size, mmap.MAP_SHARED, prot)
