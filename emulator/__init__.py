"""rocelab: a packet-level RoCEv2 fabric emulator on Linux network namespaces.

The public Python API is `emulator.Lab` (docs/api.md); the pytest plugin is
`emulator.pytest_plugin` (the `rocelab_lab` fixture).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import Lab

__all__ = ["Lab"]


def __getattr__(name: str) -> Any:
    # Lazily: the engine daemons and the controller import this package too, and need none of it.
    if name == "Lab":
        from .api import Lab

        return Lab
    raise AttributeError(f"module 'emulator' has no attribute {name!r}")
