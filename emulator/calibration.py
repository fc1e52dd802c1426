"""What `rocelab calibrate` found this machine holds, kept for `up` to read.

The record is RUN_ROOT/calibration.json (beside the labs' run dirs, a file: not a lab;
$ROCELAB_CALIBRATION names another file): the highest `max_link_rate` at which the
incast kept its fidelity here, and the ladder that found it. `/run` is a tmpfs, so a
reboot forgets it with the labs. `advice` is the pure half of `up`'s warning: a lab
shaped faster than that rate dilates less than this machine needs.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import outfile, rundirs
from .paths import RUN_ROOT

HINT = "run `rocelab calibrate` (a minute or two) to find the rate this machine holds"


def record_path() -> Path:
    return Path(os.environ.get("ROCELAB_CALIBRATION", RUN_ROOT / "calibration.json"))


def _hint_path() -> Path:
    return record_path().with_name(record_path().name + ".hinted")


@dataclass(frozen=True)
class Record:
    holds_bps: int | None  # None: not even the lowest rate tried held
    holds_rate: str | None  # as given (400M)
    at: str  # when calibrate ran (UTC)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        bps = data["holds_bps"]
        if bps is not None and (isinstance(bps, bool) or not isinstance(bps, int) or bps <= 0):
            raise ValueError(f"holds_bps {bps!r}")
        return cls(bps, data.get("holds_rate"), str(data.get("at", "?")))


def save(ladder: dict[str, Any], machine: dict[str, Any]) -> Path:
    """Write the record (a new file renamed over the old one: `up` never reads half of it;
    a link planted at the name, or on its way, is not followed: outfile)."""
    path = record_path()
    if path == RUN_ROOT / "calibration.json":
        rundirs.make_dirs(path.parent, rundirs.RUN_ROOT_MODE)
    data = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": machine} | ladder
    return outfile.write_text(path, json.dumps(data, indent=2) + "\n")  # no link followed


def load() -> Record | None:
    """The record, or None if there is none (or it cannot be read: calibrate again)."""
    try:
        return Record.from_json(json.loads(record_path().read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def advice(lab: str, rate_bps: float | None, dilation: float, record: Record | None,
           hinted: bool) -> str | None:
    """One line for `up` (None: nothing to say). `rate_bps`: the lab's fastest shaped
    link (None: no congestion plane, no dilation to judge); `hinted`: the no-record hint
    was given once already."""
    if rate_bps is None:
        return None
    if record is None:
        return None if hinted else f"note: lab {lab} is dilated (D = {dilation:g}); {HINT}"
    if record.holds_bps is None:
        return (f"warning: lab {lab}: `rocelab calibrate` ({record.at}) found no rate that keeps "
                "the incast's fidelity on this machine: queues and pauses may not be faithful")
    if rate_bps <= record.holds_bps:
        return None
    return (f"warning: lab {lab} shapes links at {rate_bps / 1e6:g} Mbit/s (D = {dilation:g}), "
            f"above the {record.holds_bps / 1e6:g} Mbit/s this machine held in `rocelab "
            f"calibrate` ({record.at}): it may not keep fidelity; set congestion.max_link_rate: "
            f"{record.holds_rate or f'{record.holds_bps // 10**6}M'} or lower")


def advice_for(lab: str, rate_bps: float | None, dilation: float) -> str | None:
    """`advice` with the record read and the once-only hint remembered (root: RUN_ROOT)."""
    hinted = _hint_path().exists()
    line = advice(lab, rate_bps, dilation, load(), hinted)
    if line is not None and line.startswith("note:"):
        if _hint_path().parent == RUN_ROOT:
            rundirs.make_dirs(RUN_ROOT, rundirs.RUN_ROOT_MODE)
        outfile.write_bytes(_hint_path(), b"")
    return line
