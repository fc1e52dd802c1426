"""Typed errors and the exit codes they map to (docs/cli.md has the table).

Library code raises these; the CLI prints one line per error and exits with
the error's code. Commands that *find* something wrong (a lab not converged,
a failed check or expectation) exit with these codes too.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1  # anything not below
    BAD_FILE = 2  # a topology or experiment file is invalid; nothing was created
    LAB_EXISTS = 3
    NOT_FOUND = 4  # no such lab, node or port
    REALIZE_FAILED = 5  # building the lab failed; everything was rolled back
    NOT_CONVERGED = 6  # routing did not settle (or the lab is not healthy) in time
    NOT_ROOT = 7
    TRANSFER_FAILED = 8  # the RoCEv2 engine failed (setup, retry limit)
    INTEGRITY_FAILED = 9  # a transfer completed but the bytes differ
    VALIDATION_FAILED = 10  # `validate`: a named check or a topology expectation failed
    EXPECTATION_FAILED = 11  # `run`: an `expect:` line, a flow or the lossless class failed
    HOST_LIMIT = 12  # the host would not hold the lab: neighbour tables, memory, namespaces
    FINDINGS = 13  # `diagnose`: a finding of severity warning or critical
    USAGE = 64  # bad command line (sysexits EX_USAGE)
    INTERRUPTED = 130


class RocelabError(Exception):
    """Base class: `str(err)` is the one-line message shown to the user."""

    exit_code = ExitCode.ERROR


class SpecError(RocelabError):
    """The topology (or experiment) file is invalid. Nothing was created."""

    exit_code = ExitCode.BAD_FILE

    def __init__(self, source: str, field: str, problem: str, line: int | None = None):
        self.source, self.field, self.problem, self.line = source, field, problem, line
        where = f"{source}: line {line}" if line else source
        super().__init__(f"{where}: {field}: {problem}")


class LabExistsError(RocelabError):
    exit_code = ExitCode.LAB_EXISTS


class LabNotFoundError(RocelabError):
    exit_code = ExitCode.NOT_FOUND


class NodeNotFoundError(RocelabError):
    """A node or port that the lab does not have (or not of the kind asked for)."""

    exit_code = ExitCode.NOT_FOUND


class RealizeError(RocelabError):
    """Creating a kernel object or daemon failed; everything was rolled back."""

    exit_code = ExitCode.REALIZE_FAILED


class ConvergeTimeout(RocelabError):
    """The fabric did not converge in time; everything was rolled back."""

    exit_code = ExitCode.NOT_CONVERGED


class NotRootError(RocelabError):
    exit_code = ExitCode.NOT_ROOT


class HostLimitError(RocelabError):
    """The lab would not fit a limit every namespace of the host shares; nothing was created."""

    exit_code = ExitCode.HOST_LIMIT


class FrrConfigError(RocelabError):
    """FRR refused a line of configuration the user gave (an `overrides: frr` snippet, a
    `frr_configs:` file, a `--templates` template). Checked before anything exists: a bad
    file (2). Found by the running daemons: the lab was rolled back (5)."""

    exit_code = ExitCode.BAD_FILE

    def __init__(self, message: str, live: bool = False):
        super().__init__(message)
        if live:
            self.exit_code = ExitCode.REALIZE_FAILED


class EngineError(RocelabError):
    """The RoCEv2 engine failed (connection setup, retry limit, integrity)."""

    exit_code = ExitCode.TRANSFER_FAILED


class IntegrityError(EngineError):
    """A transfer completed, but the two ends' digests of the payload differ."""

    exit_code = ExitCode.INTEGRITY_FAILED


class BadNameError(RocelabError):
    """A lab or node name that breaks the topology's name rules (names.py): nothing is
    looked up or touched with it. On the command line it is a bad argument (64)."""

    exit_code = ExitCode.USAGE


class SettingError(RocelabError):
    """An environment setting rocelab reads (ROCELAB_PROGRESS_EVERY) with a value it does
    not allow: a bad command line, before anything is touched."""

    exit_code = ExitCode.USAGE


class TooLongError(RocelabError):
    """A transfer that cannot finish within its time bound (`--max-duration`): refused
    before it starts, like any other bad option."""

    exit_code = ExitCode.USAGE
