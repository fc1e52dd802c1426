"""The lab itself: what it is and the numbers needed to read the others (rates, dilation).

fetch: nothing (the plan says it all). parse: info, line rate, dilation.
"""

from __future__ import annotations

from ...plan import Kind as NodeKind
from ...plan import Plan
from ..model import Families, Family, Kind, Source

NAME = "lab"


class Collector(Source):
    name = NAME

    def fetch(self) -> dict[str, str]:
        return {}

    @staticmethod
    def parse(raw: dict[str, str], plan: Plan) -> list[Family]:
        fams = Families(plan.lab)
        cp = plan.congestion
        fams.add(Kind.GAUGE, "rocelab_lab_info", "The lab: topology file and addressing (value 1).",
                 1, fams.labels(topology=plan.source, addressing=plan.addressing.value,
                 spines=str(len(plan.of_kind(NodeKind.SPINE))),
                 leaves=str(len(plan.of_kind(NodeKind.LEAF))), hosts=str(len(plan.hosts))))
        fams.add(Kind.GAUGE, "rocelab_lab_link_speed_bits_per_second",
                 "Declared (real) link speed.", plan.speed_bps)
        fams.add(Kind.GAUGE, "rocelab_lab_link_rate_bits_per_second",
                 "Rate ports are shaped to (speed / dilation); 0 if unshaped.",
                 cp.rate_bps if cp else 0)
        fams.add(Kind.GAUGE, "rocelab_lab_dilation_ratio",
                 "Time dilation D: real-equivalent time = wall time / D.", cp.dilation if cp else 1)
        return fams.as_list()
