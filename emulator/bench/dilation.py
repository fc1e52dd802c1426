"""Dilation headroom: the incast at several max_link_rates, each rate's fidelity figures.

Every rate of headroom.LADDER (or $ROCELAB_BENCH_RATES, comma-separated) runs
experiments/incast.yaml on its own lab, flows scaled with the rate (same wall time,
rate/100M times the real time). The baseline is the lowest rate, run in the same
bench run; `holds_up_to` is the highest rate below the first that breaks
(headroom.problems: the one definition of "holds"). Budget: ~25 s per rate.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..experiment import headroom, ladder

NAME = os.environ.get("ROCELAB_BENCH_PREFIX", "bench-") + "dil"


def run(repeats: int = 1, log=lambda m: print(m, file=sys.stderr)) -> dict[str, Any]:
    rates = headroom.check_rates(
        os.environ.get("ROCELAB_BENCH_RATES", ",".join(headroom.LADDER)).split(","),
        "ROCELAB_BENCH_RATES")
    load: dict[str, float] = {}

    def measure(rate: str) -> headroom.Figures:
        load[rate] = round(os.getloadavg()[0], 2)  # as each rate starts: the machine is shared
        return ladder.measure(rate, NAME)
    found = headroom.search(rates, measure, lambda m: log(f"dilation: {m}"), stop_at_break=False)
    out = found.to_json()
    out["holds_up_to"] = out.pop("holds_rate")
    out["baseline"] = out["rates"][0]["rate"]
    out["load_average_1m"] = load | {"end": round(os.getloadavg()[0], 2)}
    return out
