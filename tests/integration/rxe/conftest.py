"""One clos-2x4-rxe lab for every module here: prefill1 and decode1 are QEMU/TCG guests
running Linux Soft-RoCE, the other six hosts run rocelab's engine, and the exporter runs
(`--metrics`) for test_rxe_telemetry.py.

Booting the guests is most of what these modules cost, so the package boots them once.
Each test leaves the lab as it found it (faults healed, both guests answering, its own
servers killed) and measures what it asserts as a difference over its own run, so the
modules pass in any order. The teardown is a test too: `down` must stop both guests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ..conftest import PREFIX, cli, make_rxe_lab

NAME = f"{PREFIX}rxe"
TOPOLOGY = "topologies/clos-2x4-rxe.yaml"


def qemus(lab: str) -> list[int]:
    """QEMU processes of this lab still running (by their -name, not counting zombies)."""
    found = []
    for p in Path("/proc").iterdir():
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
            status = (p / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if b"-name" in cmd and cmd[cmd.index(b"-name") + 1].startswith(f"{lab}-".encode()) \
                and status != "Z":
            found.append(int(p.name))
    return found


@pytest.fixture(scope="package")
def lab():
    """The package's lab; after the last test, `down` (which must succeed) stops the guests."""
    made = make_rxe_lab(TOPOLOGY, NAME, "--metrics", "127.0.0.1:0")
    try:
        yield next(made)
        assert len(qemus(NAME)) == 2  # both guests still ran after every test
        cli("down", NAME)
        assert qemus(NAME) == []
    finally:
        made.close()  # make_lab's own `down`, whatever failed: nothing to remove, if the above ran
