"""Errors raised by the RoCEv2 engine.

Every failure of the codec is one type, `MalformedPacket`, so a receive
loop needs exactly one `except` to count and drop garbage from the wire.
"""

from __future__ import annotations

from emulator.errors import EngineError


class MalformedPacket(EngineError):
    """Bytes that are not a RoCEv2 packet this engine understands."""

    def __init__(self, problem: str):
        self.problem = problem
        super().__init__(f"malformed RoCEv2 packet: {problem}")


class FieldOverflow(EngineError):
    """A header field was given a value that does not fit its width."""

    def __init__(self, header: str, field: str, value: int, bits: int):
        self.header, self.field, self.value, self.bits = header, field, value, bits
        super().__init__(f"{header}.{field}={value} does not fit in {bits} bits")


class QpStateError(EngineError):
    """A work request was posted to a queue pair that is in the error state."""

    def __init__(self, qpn: int, reason: str):
        self.qpn, self.reason = qpn, reason
        super().__init__(f"QP {qpn:#x} is in error state: {reason}")


class AccessError(EngineError):
    """A local buffer or memory registration request is unusable."""


class QpConfigError(EngineError):
    """Queue pair parameters that cannot work (MTU, window, 24-bit numbers)."""
