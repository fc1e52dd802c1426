from __future__ import annotations

import os
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("ROCELAB_UPDATE_GOLDEN") == "1"


@pytest.fixture
def golden():
    """Compare text with a golden file (a path under tests/unit/golden, or an absolute one);
    `make golden` rewrites them instead."""
    def check(relpath: str, text: str) -> None:
        path = GOLDEN / relpath
        if UPDATE:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        assert path.exists(), f"missing golden file {path}: run `make golden`"
        assert text == path.read_text(), f"{path} differs: run `make golden` and review the diff"
    return check
