"""Where a lab lives on disk. One lab = one run directory under RUN_ROOT."""

from __future__ import annotations

import os
from pathlib import Path

# /run is a tmpfs: a reboot clears run dirs together with the namespaces they describe.
RUN_ROOT = Path(os.environ.get("ROCELAB_RUN_ROOT", "/run/rocelab"))
TEMPLATES_DIR = Path(
    os.environ.get("ROCELAB_TEMPLATES", Path(__file__).resolve().parent.parent / "frr-templates"))
FRR_BIN_DIR = Path(os.environ.get("ROCELAB_FRR_DIR", "/usr/lib/frr"))
ENV_TAG = "ROCELAB_LAB"  # every process a lab starts carries ROCELAB_LAB=<lab>
NS_TAG_PREFIX = "rocelab:"  # every namespace's lo carries ifalias rocelab:<lab>


def lab_run_dir(lab: str) -> Path:
    return RUN_ROOT / lab


def node_run_dir(lab: str, node: str) -> Path:
    return RUN_ROOT / lab / node


def state_file(lab: str) -> Path:
    return RUN_ROOT / lab / "state.json"
