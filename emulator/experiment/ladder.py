"""Run the incast at one `max_link_rate` (root): the measuring half of headroom.py.

Each rate gets its own lab (the rate sets D, which the shaping, DCQCN's timers and the
plan all follow), brought up from experiments/incast.yaml's topology with only
`congestion.max_link_rate` changed, the incast's flows scaled with the rate
(`headroom.scaled`), and taken down again whatever happens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import lab
from ..spec import read_yaml
from . import headroom, runner
from .spec import load

INCAST = Path(__file__).resolve().parent.parent.parent / "experiments" / "incast.yaml"


def topology(rate: str, name: str, experiment: Path = INCAST) -> dict[str, Any]:
    """The experiment's topology as a dict, its lab `name`, shaped for `rate`."""
    _, path = load(experiment)
    topo = dict(read_yaml(path)[0])
    topo["congestion"] = dict(topo.get("congestion") or {}) | {
        "enabled": True, "dilation": "auto", "max_link_rate": rate}
    return topo | {"name": name}


def measure(rate: str, name: str, progress: runner.Progress = lambda m: None,
            experiment: Path = INCAST) -> headroom.Figures:
    """The incast's figures at `rate`, on a lab `name` brought up for it and taken down."""
    exp, _ = load(experiment)
    lab.up(topology(rate, name, experiment), name=name, progress=progress)
    try:
        results, _ = runner.run_fabric(headroom.scaled(exp, rate), Path(experiment), name,
                                       progress=progress)
    finally:
        lab.down(name)
    return headroom.figures(rate, results)
