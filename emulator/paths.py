"""Where a lab lives on disk. One lab = one run directory under RUN_ROOT."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import RocelabError
from .names import check_lab

# /run is a tmpfs: a reboot clears run dirs together with the namespaces they describe.
RUN_ROOT = Path(os.environ.get("ROCELAB_RUN_ROOT", "/run/rocelab"))
TEMPLATES_DIR = Path(
    os.environ.get("ROCELAB_TEMPLATES", Path(__file__).resolve().parent.parent / "frr-templates"))
FRR_BIN_DIR = Path(os.environ.get("ROCELAB_FRR_DIR", "/usr/lib/frr"))
ENV_TAG = "ROCELAB_LAB"  # every process a lab starts carries ROCELAB_LAB=<lab>
NS_TAG_PREFIX = "rocelab:"  # every namespace's lo carries ifalias rocelab:<lab>


def lab_run_dir(lab: str) -> Path:
    """RUN_ROOT/lab, for a lab name only (names.py): never `..`, `/` or a path."""
    return RUN_ROOT / check_lab(lab)


def node_run_dir(lab: str, node: str) -> Path:
    return lab_run_dir(lab) / node


def state_file(lab: str) -> Path:
    return lab_run_dir(lab) / "state.json"


def own_run_dir(lab: str) -> Path | None:
    """The lab's run dir if `down` may remove it (None: there is none): a real directory,
    not a symlink, whose resolved parent is the resolved RUN_ROOT. Anything else is refused."""
    run_dir = lab_run_dir(lab)
    if run_dir.is_symlink():
        raise RocelabError(f"lab {lab}: run dir {run_dir} is a symlink (to {os.readlink(run_dir)}): "
                           "not following it; remove the link yourself")
    if not run_dir.exists():
        return None
    if not run_dir.is_dir() or run_dir.resolve().parent != RUN_ROOT.resolve():
        raise RocelabError(f"lab {lab}: {run_dir} is not a directory directly under {RUN_ROOT}: "
                           "not removing it")
    return run_dir
