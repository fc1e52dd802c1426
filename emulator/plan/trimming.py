"""Resolve `congestion.trimming` (and the MRC class it serves) into numbers.

Trimming (UET 1.0's, as SONiC and Cumulus switches do it): at a switch port's egress, a
packet of a trimmable class that would queue above `threshold` bytes is cut to `size`
frame bytes, re-marked with `dscp` and sent on `tc`, the priority class, so the receiver
hears of the congestion loss at once instead of after a timeout. `dscp` maps to `tc` in
the dataplane, so a trimmed packet stays on the priority class to its destination. Only a
lossy class may be trimmed: the lossless RoCE class keeps PFC.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import RocelabError, SpecError
from ..spec.congestion import Congestion
from ..units import parse_size

MRC_TC = 2  # MRC data: lossy, trimmable
TRIMMABLE_TCS = (0, MRC_TC)  # the lossy classes that have a queue of their own
PRIORITY_TC = 6  # the class served first (CNPs, routing control, trimmed headers)
LOSSLESS_TC = 3  # RoCE, PFC
MAX_FRAME = 64 << 10  # margin below the buffer: one frame of any MTU fits above the threshold


@dataclass(frozen=True)
class TrimPlan:
    tcs: tuple[int, ...]  # trimmable classes
    threshold: int  # queue bytes of the class above which a packet is trimmed
    size: int  # frame bytes a trimmed packet keeps
    dscp: int  # DSCP of trimmed packets (maps to `tc`)
    tc: int  # class trimmed packets are sent on


def resolve(source: str, c: Congestion, buffer: int) -> TrimPlan | None:
    """The trimming plan of a `congestion:` section `c` whose lossy buffer is `buffer` bytes
    (None: trimming off). Raises SpecError naming the field."""
    _check_dscp(source, c)
    t = c.trimming
    if not t.enabled:
        return None
    try:
        threshold = parse_size(t.threshold) if t.threshold is not None else buffer // 2
    except RocelabError as e:
        raise SpecError(source, "congestion.trimming.threshold", str(e)) from None
    _check_classes(source, t.classes)
    if t.priority_tc != PRIORITY_TC:
        raise SpecError(source, "congestion.trimming.priority_tc",
                        f"must be {PRIORITY_TC}: the only class served ahead of the lossy "
                        f"ones (got {t.priority_tc})")
    if not 0 < threshold <= buffer - MAX_FRAME:
        raise SpecError(source, "congestion.trimming.threshold",
                        f"must be positive and at least 64KiB below congestion.buffer "
                        f"({c.buffer}), so the class trims before it tail-drops (got {threshold})")
    return TrimPlan(tcs=tuple(sorted(set(t.classes))), threshold=threshold, size=t.size,
                    dscp=t.dscp, tc=t.priority_tc)


def _check_dscp(source: str, c: Congestion) -> None:
    if c.mrc_dscp in (c.roce_dscp, c.cnp_dscp):
        raise SpecError(source, "congestion.mrc_dscp",
                        f"must differ from roce_dscp ({c.roce_dscp}) and cnp_dscp ({c.cnp_dscp})")
    if c.trimming.enabled and c.trimming.dscp in (c.roce_dscp, c.cnp_dscp, c.mrc_dscp):
        raise SpecError(source, "congestion.trimming.dscp",
                        f"must differ from roce_dscp ({c.roce_dscp}), cnp_dscp ({c.cnp_dscp}) "
                        f"and mrc_dscp ({c.mrc_dscp}): a trimmed packet must be told apart")


def _check_classes(source: str, classes: list[int]) -> None:
    if not classes:
        raise SpecError(source, "congestion.trimming.classes",
                        f"must name at least one lossy class; allowed: {_allowed()}")
    for tc in classes:
        if tc == LOSSLESS_TC:
            raise SpecError(source, "congestion.trimming.classes",
                            f"TC {tc} is the lossless RoCE class: it keeps PFC, it is never "
                            f"trimmed; allowed: {_allowed()}")
        if tc not in TRIMMABLE_TCS:
            raise SpecError(source, "congestion.trimming.classes",
                            f"TC {tc} is not a lossy class with a queue; allowed: {_allowed()}")


def _allowed() -> str:
    return ", ".join(map(str, TRIMMABLE_TCS))
