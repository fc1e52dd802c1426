"""The compiled part of the engine's data path, built by `pip install` (pyproject.toml has the rest).

`emulator.roce._wire` (C, CPython API only) builds, sends, receives, parses and
ICRC-checks RoCEv2 datagrams in batches. It is optional: if the compiler or the
Python headers are missing the install still succeeds and the engine runs its
pure-Python path (emulator/roce/wire.py says which one runs).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "emulator.roce._wire", ["emulator/roce/_wire.c"],
    depends=["emulator/roce/_wire_send.h", "emulator/roce/_wire_recv.h",
             "emulator/roce/_wire_mrc.h", "emulator/roce/_wire_mrcio.h",
             "emulator/roce/_wire_mrcrx.h", "emulator/roce/_wire_mrctx.h"],
    extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers"],
    optional=True,
)])
