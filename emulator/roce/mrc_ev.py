"""An MRC connection's entropy values (EVs): the paths it sprays packets over.

Each EV is a UDP source port on one plane; the fabric's ECMP hash maps it to a
path. An EV is UNKNOWN until a packet sent on it is acknowledged (then GOOD),
ASSUMED_BAD once a loss on it retires it, DENIED when it also misses
`probe_retries` probes in a row. Retired EVs are probed every `probe_interval`
(DENIED ones `deny_factor` times less often) and return to GOOD on the first
answer. The floor `min_active` keeps a connection from retiring every path.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

EV_LOW, EV_HIGH = 0xC000, 0x10000  # the RoCEv2 source-port range rxe uses


class EvState(str, Enum):
    GOOD = "good"
    ASSUMED_BAD = "assumed_bad"
    DENIED = "denied"
    UNKNOWN = "unknown"


USABLE = (EvState.GOOD, EvState.UNKNOWN)


@dataclass
class Path:
    """One EV on one plane, with what was sent on it."""

    ev: int
    plane: int
    state: EvState = EvState.UNKNOWN
    bytes: int = 0
    packets: int = 0
    retirements: int = 0
    probe_due: float = 0.0
    probe_out: bool = False  # a probe awaits its answer
    probes_missed: int = 0
    rtt_s: float | None = None
    seq_sent: int = 0  # packets sent on this EV so far (its sending order)
    seq_acked: int = -1  # the latest sending-order place acknowledged
    queue: deque[Any] = field(default_factory=deque, repr=False)  # its packets, in order

    __hash__ = object.__hash__

    def as_dict(self) -> dict[str, object]:
        return {"ev": self.ev, "plane": self.plane, "state": self.state.value,
                "bytes": self.bytes, "packets": self.packets, "retirements": self.retirements}


def entropy_values(seed: int, count: int, planes: int = 1) -> list[tuple[int, int]]:
    """`count` distinct (plane, EV) pairs per plane from `seed`, interleaved by plane so a
    round robin over them takes the planes in turn."""
    rng = random.Random(seed)
    per_plane = [rng.sample(range(EV_LOW, EV_HIGH), count) for _ in range(planes)]
    return [(p, per_plane[p][i]) for i in range(count) for p in range(planes)]


class EvSet:
    """The EV set of one connection: round robin over usable EVs, retirement, probes."""

    def __init__(self, evs: list[tuple[int, int]], min_active: int, probe_interval_s: float,
                 probe_retries: int = 3, deny_factor: int = 8):
        if not evs:
            raise ValueError("an EV set needs at least one EV")
        self.paths = [Path(ev, plane) for plane, ev in evs]
        self.by_ev = {(p.plane, p.ev): p for p in self.paths}
        self.min_active = max(1, min(min_active, len(self.paths)))
        self.probe_interval_s, self.probe_retries = probe_interval_s, probe_retries
        self.deny_factor = deny_factor
        self.retirements = self.probes_sent = self.probes_answered = 0
        self._active = list(self.paths)
        self._cursor = 0

    @property
    def active(self) -> int:
        return len(self._active)

    def next(self, avoid: Path | None = None) -> Path:
        """The next usable EV in turn (not `avoid` if another is usable)."""
        active = self._active
        self._cursor = (self._cursor + 1) % len(active)
        path = active[self._cursor]
        if path is avoid and len(active) > 1:
            self._cursor = (self._cursor + 1) % len(active)
            path = active[self._cursor]
        return path

    def acked(self, path: Path) -> None:
        if path.state is EvState.UNKNOWN:
            path.state = EvState.GOOD

    def retire(self, path: Path, now: float) -> bool:
        """A loss on `path`: ASSUMED_BAD at once, unless the floor forbids (False)."""
        if path.state not in USABLE or len(self._active) <= self.min_active:
            return False
        path.state = EvState.ASSUMED_BAD
        path.retirements += 1
        self.retirements += 1
        path.probe_due, path.probe_out, path.probes_missed = now + self.probe_interval_s, False, 0
        self._active.remove(path)
        return True

    def plane_down(self, plane: int) -> bool:
        """Every EV of `plane` retired (a plane lost, or this connection never got through)."""
        evs = [p for p in self.paths if p.plane == plane]
        return bool(evs) and all(p.state not in USABLE for p in evs)

    def retire_plane(self, plane: int, now: float) -> int:
        """Start `plane`'s EVs retired (the floor kept), to be probed at once: a new
        connection to a peer whose plane an earlier one lost. How many it retired."""
        n = 0
        for path in [p for p in self._active if p.plane == plane]:
            if self.retire(path, now):
                path.probe_due = now
                n += 1
        return n

    def probes_due(self, now: float) -> list[Path]:
        """The retired EVs to probe now (each counted as sent); a probe still unanswered
        counts as missed, and `probe_retries` misses in a row deny the EV."""
        due = []
        for path in self.paths:
            if path.state in USABLE or path.probe_due > now:
                continue
            if path.probe_out:
                path.probes_missed += 1
                if path.probes_missed >= self.probe_retries:
                    path.state = EvState.DENIED
            interval = self.probe_interval_s * (self.deny_factor
                                                if path.state is EvState.DENIED else 1)
            path.probe_due, path.probe_out = now + interval, True
            self.probes_sent += 1
            due.append(path)
        return due

    def answered(self, plane: int, ev: int, rtt_s: float) -> bool:
        """A probe reply on (plane, ev): the EV is GOOD again. False if it was not retired."""
        path = self.by_ev.get((plane, ev))
        if path is None or path.state in USABLE:
            return False
        self.probes_answered += 1
        path.state, path.probe_out, path.rtt_s = EvState.GOOD, False, rtt_s
        self._active.append(path)
        return True

    def next_probe(self) -> float | None:
        due = [p.probe_due for p in self.paths if p.state not in USABLE]
        return min(due) if due else None

    def by_state(self) -> dict[str, int]:
        out = {s.value: 0 for s in EvState}
        for p in self.paths:
            out[p.state.value] += 1
        return out
