"""pytest plugin (registered through the `pytest11` entry point): labs for topology tests.

    def test_spine_failure(rocelab_lab):
        lab = rocelab_lab("fabric.yaml")          # up once per module, shared by its tests
        lab.fail_node("spine1")
        assert all(lab.ecmp(leaf, "decode1") == 1 for leaf in lab.leaves if ...)

Fixtures: `rocelab_lab` (one lab per topology and name, per module), `rocelab_session_lab`
(per session) and `rocelab_function_lab` (per test). Each is a factory: call it with a
topology file or dict (and optionally `name=`, `timeout_s=`); it returns an
`emulator.Lab`. Every lab is torn down when its scope ends, also after a failing test,
Ctrl-C or SIGTERM; then the plugin checks that nothing of it is left (namespaces,
processes, run dir) and fails the test run if something is. Without root (or FRR) the
factory skips the test, saying why; `@pytest.mark.rocelab` skips the same way without
calling it. JUnit XML comes from pytest's own `--junitxml`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

FRR_ZEBRA = Path(os.environ.get("ROCELAB_FRR_DIR", "/usr/lib/frr")) / "zebra"


def missing_requirement() -> str | None:
    """Why real labs cannot run here (None if they can)."""
    if os.geteuid() != 0:
        return "rocelab labs need root (network namespaces, FRR)"
    if not FRR_ZEBRA.exists():
        return "FRR is not installed (apt install frr, or make setup)"
    if shutil.which("ip") is None:
        return "iproute2 is not installed"
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "rocelab: builds real rocelab labs (root and FRR); skipped, saying why, otherwise")
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:  # a cancelled CI job: tear down too
        signal.signal(signal.SIGTERM, _sigterm)


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # pytest then runs every fixture's teardown


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("rocelab") is not None and (why := missing_requirement()):
        pytest.skip(why)


class LabFactory:
    """Brings labs up on first request and keeps them for the scope; `close` tears down."""

    def __init__(self) -> None:
        self._labs: dict[tuple[str, str | None], tuple[Any, AbstractContextManager[Any]]] = {}

    def __call__(self, topology: str | Path | Mapping[str, Any], name: str | None = None,
                 **options: Any) -> Any:
        from .api import Lab
        from .names import check_lab

        if name is not None:
            check_lab(name, "name")  # a bad name fails the test, even where labs would skip
        key = (json.dumps(topology, sort_keys=True) if isinstance(topology, Mapping)
               else str(Path(topology).resolve()), name)
        if key not in self._labs:
            if why := missing_requirement():
                pytest.skip(why)
            context = Lab.up(topology, name=name, **options)
            self._labs[key] = (context.__enter__(), context)
        return self._labs[key][0]

    def close(self) -> None:
        """Tear every lab down (all of them, whatever fails), then check nothing is left."""
        names, errors = [], []
        for lab, context in reversed(list(self._labs.values())):
            names.append(lab.name)
            try:
                context.__exit__(None, None, None)
            except Exception as e:  # noqa: BLE001 -- every lab must get its chance
                errors.append(f"{lab.name}: {e}")
        self._labs.clear()
        leaked = {n: left for n in names if (left := leftovers(n))}
        if errors or leaked:
            pytest.fail(f"rocelab teardown: {'; '.join(errors)} leaked: {leaked}"
                        if leaked else f"rocelab teardown: {'; '.join(errors)}", pytrace=False)


def leftovers(lab: str) -> dict[str, list[Any]]:
    """What of lab `lab` still exists on this machine (empty: nothing)."""
    from . import netns, procs, state

    found: dict[str, list[Any]] = {
        "namespaces": [n for n in netns.list_names() if n.startswith(f"{lab}-")],
        "processes": [p for p, tag in procs.tagged_processes().items() if tag == lab],
        "run_dirs": [d for d in state.run_dir_labs() if d == lab]}
    return {k: v for k, v in found.items() if v}


def _factory() -> Iterator[LabFactory]:
    factory = LabFactory()
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="module")
def rocelab_lab() -> Iterator[LabFactory]:
    """Factory: rocelab_lab(topology, name=None, **up_options) -> emulator.Lab, up once per
    module (per topology and name), always torn down and checked for leftovers."""
    yield from _factory()


@pytest.fixture(scope="session")
def rocelab_session_lab() -> Iterator[LabFactory]:
    """As rocelab_lab, one lab per topology and name for the whole session."""
    yield from _factory()


@pytest.fixture
def rocelab_function_lab() -> Iterator[LabFactory]:
    """As rocelab_lab, a fresh lab for each test."""
    yield from _factory()
