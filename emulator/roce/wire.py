"""Which data path the engine runs: the compiled `_wire` module, or pure Python.

`_wire` (emulator/roce/_wire.c, built by `pip install` through setup.py) does
the per-packet byte work -- building datagrams with their ICRC straight into
send slots, one sendmmsg(2) per batch, one recvmmsg(2) per receive turn,
parsing and ICRC-checking what came in -- and hands `Segment`s to the sans-IO
RC state machine, which stays Python. `fastpath.py`, `icrc.py` and
`transport.SendBatch` are the reference it is tested against, and the
fallback: ROCELAB_ENGINE_PURE=1 forces it (tests run both), and a missing
build falls back to it with one warning.
"""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType

from emulator.roce.fastpath import Segment
from emulator.roce.headers import EXT_LENGTH
from emulator.roce.icrc import PSEUDO_LRH_CRC, crc32

PURE_ENV = "ROCELAB_ENGINE_PURE"
log = logging.getLogger("rocelab.engine")
_state: dict[str, ModuleType | None] = {}


def _load() -> ModuleType | None:
    try:  # by name: a compiled module, not a Python one the layer check could read
        _wire = importlib.import_module("emulator.roce._wire")
    except ImportError as e:
        log.warning("engine: the compiled data path (emulator.roce._wire) is not built (%s); "
                    "running the pure-Python one, several times slower per packet: reinstall "
                    "with a C compiler and the Python headers (pip install -e .)", e)
        return None
    ext = bytes(EXT_LENGTH.get(op, 0xFF) for op in range(256))
    _wire.configure(Segment, crc32, PSEUDO_LRH_CRC, ext)
    return _wire


def forced_pure() -> bool:
    """ROCELAB_ENGINE_PURE is set (not to 0): run the pure-Python path."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def compiled() -> ModuleType | None:
    """The configured `_wire` module, or None: not built, or ROCELAB_ENGINE_PURE=1."""
    if forced_pure():
        return None
    if "wire" not in _state:
        _state["wire"] = _load()
    return _state["wire"]


def name() -> str:
    """The data path this process runs, for reports: "compiled" or "python"."""
    return "python" if compiled() is None else "compiled"
