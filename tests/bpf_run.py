"""What the unit tests that run the fabric's BPF program in the kernel
(BPF_PROG_TEST_RUN through libbpf) share: libbpf's run options and where the
program's per-packet context goes."""

from __future__ import annotations

import ctypes

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
