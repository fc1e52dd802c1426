"""Session rules for every suite here (tests/ and examples/), whatever the arguments.

- Unit tests run first, and a failing unit test stops the run before the first lab is
  built: a broken unit fails in a minute, not after twenty of integration tests.
- Under CI (the environment's CI is true, as `.ci/run` sets it), a skipped test is a
  failure: a suite that skips because the machine is wrong (no root, no FRR, no guest
  kernel) must not be green. A skip CI expects goes into CI_MAY_SKIP with its reason.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

UNIT = Path(__file__).parent / "tests" / "unit"
# Node ids (or their prefixes) whose skip CI accepts, with why. Keep it empty: a skip
# here is a feature nobody checks.
CI_MAY_SKIP: dict[str, str] = {}


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def is_unit(item: pytest.Item) -> bool:
    return UNIT in Path(str(item.fspath)).parents


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: not is_unit(item))  # stable: each group keeps its order


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    failed = item.session.testsfailed
    if is_unit(item) and nextitem is not None and not is_unit(nextitem) and failed:
        item.session.shouldstop = f"{failed} unit test(s) failed: the integration tests were not run"


def ci_allows(nodeid: str) -> bool:
    return any(nodeid == allowed or nodeid.startswith(allowed + "[") for allowed in CI_MAY_SKIP)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    report = outcome.get_result()
    if not (under_ci() and report.skipped) or hasattr(report, "wasxfail"):
        return
    if ci_allows(item.nodeid):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (f"skipped under CI, which expects every test to run ({reason}); "
                       "fix the machine, or add the test to CI_MAY_SKIP in conftest.py saying why")
