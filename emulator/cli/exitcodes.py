"""The exit codes each command can end with: docs/cli.md's "Exit codes by command" table.

Declared here, per command, so the docs can be checked against the code:
tests/unit/test_docs.py compares this table with the docs' row for each command,
with the codes each command module can reach directly (`ExitCode.X`, the errors it
raises, the library checks it calls) and with the codes the command-line tests and
the fuzz see each command exit with. A command that learns a new way to fail needs
a line here and in its docs row, or those tests fail.
"""

from __future__ import annotations

from ..errors import ExitCode as E

# Every command: ok, an error without a code of its own (an output path that cannot
# be written, ...), a bad command line, interrupted.
ANY = frozenset({E.OK, E.ERROR, E.USAGE, E.INTERRUPTED})
ON_LAB = ANY | {E.NOT_ROOT, E.NOT_FOUND}  # needs root, and a lab (or node) that exists
MOVES_DATA = ON_LAB | {E.TRANSFER_FAILED, E.INTEGRITY_FAILED}
BUILDS = {E.BAD_FILE, E.LAB_EXISTS, E.REALIZE_FAILED, E.NOT_CONVERGED, E.HOST_LIMIT}

CODES: dict[str, frozenset[E]] = {
    "up": ANY | BUILDS | {E.NOT_ROOT, E.VALIDATION_FAILED},
    "down": ANY | {E.NOT_ROOT},
    "status": ON_LAB | {E.NOT_CONVERGED},
    "wait": ON_LAB | {E.NOT_CONVERGED},
    "validate": ON_LAB | {E.BAD_FILE, E.VALIDATION_FAILED},
    "exec": ON_LAB,  # and the command's own code (PASSTHROUGH)
    "render": ANY | {E.BAD_FILE},
    "export": ANY | {E.BAD_FILE},
    "save": ON_LAB,
    "schema": ANY,
    "transfer": MOVES_DATA,
    "kv": MOVES_DATA,
    "replay": MOVES_DATA | {E.BAD_FILE, E.EXPECTATION_FAILED},
    "perftest": ON_LAB | {E.TRANSFER_FAILED},
    "run": MOVES_DATA | BUILDS | {E.EXPECTATION_FAILED},
    "calibrate": ANY | BUILDS | {E.NOT_ROOT, E.EXPECTATION_FAILED},
    "check": ANY | {E.BAD_FILE},
    "fail": ON_LAB | {E.NOT_CONVERGED},
    "heal": ON_LAB | {E.NOT_CONVERGED},
    "diagnose": ON_LAB | {E.BAD_FILE, E.FINDINGS},
    "metrics": ON_LAB,
    "top": ON_LAB,
    "graph": ANY | {E.BAD_FILE},
    "list": ANY | {E.NOT_ROOT},
    "vtysh": ON_LAB,
    "capture": ON_LAB,
}

PASSTHROUGH = frozenset({"exec"})  # also exits with the code of the command it ran
