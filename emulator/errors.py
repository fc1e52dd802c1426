"""Typed errors. Library code raises these; the CLI prints one line per error."""

from __future__ import annotations


class RocelabError(Exception):
    """Base class: `str(err)` is the one-line message shown to the user."""

    exit_code = 1


class SpecError(RocelabError):
    """The topology (or experiment) file is invalid. Nothing was created."""

    exit_code = 2

    def __init__(self, source: str, field: str, problem: str, line: int | None = None):
        self.source, self.field, self.problem, self.line = source, field, problem, line
        where = f"{source}: line {line}" if line else source
        super().__init__(f"{where}: {field}: {problem}")


class LabExistsError(RocelabError):
    exit_code = 3


class LabNotFoundError(RocelabError):
    exit_code = 4


class RealizeError(RocelabError):
    """Creating a kernel object or daemon failed; everything was rolled back."""

    exit_code = 5


class ConvergeTimeout(RocelabError):
    """The fabric did not converge in time; everything was rolled back."""

    exit_code = 6


class NotRootError(RocelabError):
    exit_code = 7


class EngineError(RocelabError):
    """The RoCEv2 engine failed (connection setup, retry limit, integrity)."""

    exit_code = 8
