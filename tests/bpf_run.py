"""What the unit tests that run the fabric's BPF program in the kernel
(BPF_PROG_TEST_RUN through libbpf) share: libbpf's run options and where the
program's per-packet context goes."""

from __future__ import annotations

import ctypes
import os

SKB_MARK, SKB_CB = 8, 48  # offsets in struct __sk_buff (uapi, append-only)


class RunOpts(ctypes.Structure):
    """libbpf's struct bpf_test_run_opts."""

    _fields_ = [("sz", ctypes.c_size_t), ("data_in", ctypes.c_void_p),
                ("data_out", ctypes.c_void_p), ("data_size_in", ctypes.c_uint32),
                ("data_size_out", ctypes.c_uint32), ("ctx_in", ctypes.c_void_p),
                ("ctx_out", ctypes.c_void_p), ("ctx_size_in", ctypes.c_uint32),
                ("ctx_size_out", ctypes.c_uint32), ("retval", ctypes.c_uint32),
                ("repeat", ctypes.c_int), ("duration", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32),
                ("batch_size", ctypes.c_uint32)]


def run_once(run: ctypes._CFuncPtr, fd: int, data: bytes, ctx: bytes) -> tuple[int, bytes]:
    """Run program `fd` once on `data` with `ctx` as its __sk_buff (libbpf's
    bpf_prog_test_run_opts, `run`): its return value and the packet it left."""
    data_in = ctypes.create_string_buffer(data, len(data))
    data_out = ctypes.create_string_buffer(len(data) + 256)
    ctx_in = ctypes.create_string_buffer(ctx, len(ctx))
    opts = RunOpts(sz=ctypes.sizeof(RunOpts), data_in=ctypes.addressof(data_in),
                   data_out=ctypes.addressof(data_out), data_size_in=len(data),
                   data_size_out=len(data_out), ctx_in=ctypes.addressof(ctx_in),
                   ctx_size_in=len(ctx), repeat=1)
    ret = run(fd, ctypes.byref(opts))
    assert ret == 0, f"BPF_PROG_TEST_RUN: {os.strerror(ctypes.get_errno() or -ret)}"
    return opts.retval, data_out.raw[:opts.data_size_out]
