"""An MRC connection's entropy values (EVs): the paths it sprays packets over.

Each EV is a UDP source port on one plane; the fabric's ECMP hash maps it to a
path. An EV is UNKNOWN until a packet sent on it is acknowledged (then GOOD),
ASSUMED_BAD once a loss on it retires it, DENIED when it also misses
`probe_retries` probes in a row. Retired EVs are probed every `probe_interval`
(DENIED ones `deny_factor` times less often) and return to GOOD on the first
answer. The floor `min_active` keeps a connection from retiring every path.

Two policies use what the acknowledgements prove. A resend goes on an EV
acknowledged lately (a path that works both ways now), not merely the next in
turn: behind a silent failure the next in turn may be an EV whose path died but
is not retired yet (or is kept by the floor), and a packet resent onto it waits
another ACK timeout (and its timeouts double after 7). And on a connection with
several planes, a plane is presumed lost when nothing sent on it is acknowledged
for `PLANE_SILENCE` of the probe interval (the ACK timeout) while the other
planes were acknowledged again and again (a SACK covers every plane's packets: a
silent plane is one whose packets stop arriving), or once `PLANE_EVIDENCE` of its
EVs were retired with nothing acknowledged on it since. Its usable EVs then
retire at once, are probed at once (one that answers is back within a round
trip), and the sender resends what they hold (`presumed`). Otherwise a lost
plane keeps taking its share of every window until its packets' ACK timeouts,
and the connection stalls on it for one.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, cast

from emulator.roce.mrc_lb import Recycler

EV_LOW, EV_HIGH = 0xC000, 0x10000  # the RoCEv2 source-port range rxe uses


class EvState(str, Enum):
    GOOD = "good"
    ASSUMED_BAD = "assumed_bad"
    DENIED = "denied"
    UNKNOWN = "unknown"


USABLE = (EvState.GOOD, EvState.UNKNOWN)
PLANE_EVIDENCE = 2  # EVs of one plane retired, none of it acknowledged since: plane lost
PLANE_SILENCE = 0.25  # of the probe interval: a plane unacknowledged this long, others not
PLANE_MOVES = 4  # ... while the others' acknowledgements moved at this many polls since
RECENT_ROUNDS = 4  # "acknowledged lately": within this many rounds of the active EVs


@dataclass(slots=True)
class Path:
    """One EV on one plane, with what was sent on it. (Slots: the compiled sender's
    records, _wire_mrctx.h, read and write these fields in place.)"""

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
    acked_at: int = -1  # the set's acknowledgement count at this EV's latest one
    retired_at: int = -1  # ... at its latest retirement
    aside_until: int = 0  # set aside (mrc_lb) until this many picks
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
    """The EV set of one connection: recycled EVs (mrc_lb) or round robin over usable EVs,
    retirement, probes."""

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
        self.acks = 0  # acknowledgements so far (EVs' `acked_at`, `retired_at` count them)
        self.planes_lost = 0  # times the plane rule retired a plane's remaining EVs
        planes = 1 + max(p.plane for p in self.paths)
        self._multiplane = planes > 1
        self.plane_acks = [0] * planes  # acknowledgements per plane
        # per plane: its acks, when they last moved, and `_moves` (polls at which some
        # plane's acks moved) then
        self._plane_moved: list[tuple[int, float, int]] = []
        self._moves = 0
        self._judged: set[int] = set()  # planes presumed lost since their acks last moved
        self.presumed: list[Path] = []  # EVs a plane rule retired: the sender resends their
        # outstanding packets at once (`take_presumed`) instead of at their ACK timeouts
        self._active = list(self.paths)
        self._cursor = 0
        self.lb = Recycler(2 * len(self.paths), USABLE)  # new packets' EVs (mrc_lb: REPS)
        self.recycle = self.lb.fresh.append  # an EV whose packet was acknowledged

    @property
    def active(self) -> int:
        return len(self._active)

    def next(self, avoid: Path | None = None) -> Path:
        """A new packet's EV: a recycled one (mrc_lb), else the next usable one in turn
        not set aside. For a resend (`avoid`: the EV it was lost on), the next one
        acknowledged lately other than `avoid`, if there is one."""
        if avoid is None:
            recycled = self.lb.pick()
            if recycled is not None:
                return recycled
        active = self._active
        n = len(active)
        self._cursor = (self._cursor + 1) % n
        path = active[self._cursor]
        if avoid is None or n == 1:
            return self._not_aside(path) if self.lb.aside(path) else path
        lately = max(self.acks - RECENT_ROUNDS * n, -1)  # never acknowledged: not lately
        for i in range(n):
            cand = active[(self._cursor + i) % n]
            if cand is not avoid and cand.acked_at > lately:
                self._cursor = (self._cursor + i) % n
                return cand
        if path is avoid:
            self._cursor = (self._cursor + 1) % n
            path = active[self._cursor]
        return path

    def take(self, n: int, compiled: Any = None) -> list[Path]:
        """`next()` `n` times: the EVs of a run of `n` new packets, in one call (the
        sender's hot path; the Recycler's pick inlined). `compiled`: the configured
        `_wire` module (mrc_sender._compiled), whose mrc_take does the same in C."""
        lb = self.lb
        if compiled is not None:
            out, self._cursor, lb.picks, recycled = compiled.mrc_take(
                lb.fresh, lb.usable, self._active, self._cursor, lb.picks, n)
            lb.recycled += recycled
            return cast(list[Path], out)
        fresh, usable, out = lb.fresh, lb.usable, []
        for _ in range(n):
            lb.picks = picks = lb.picks + 1
            while fresh:
                path = fresh.popleft()
                if path.state in usable and path.aside_until <= picks:
                    lb.recycled += 1
                    break
            else:
                active = self._active
                self._cursor = (self._cursor + 1) % len(active)
                path = active[self._cursor]
                if lb.aside(path):
                    path = self._not_aside(path)
            out.append(path)
        return out

    def acked_all(self, paths: list[Path]) -> None:
        """`acked` of each of `paths`, in order (a cumulative acknowledgement's advance)."""
        acks, plane_acks, unknown, good = self.acks, self.plane_acks, EvState.UNKNOWN, EvState.GOOD
        for path in paths:
            acks += 1
            plane_acks[path.plane] += 1
            path.acked_at = acks
            if path.state is unknown:
                path.state = good
        self.acks = acks

    def _not_aside(self, path: Path) -> Path:
        """The round robin's next EV not set aside from `path` on (`path` if all are)."""
        active, n, lb = self._active, len(self._active), self.lb
        for i in range(1, n):
            cand = active[(self._cursor + i) % n]
            if not lb.aside(cand):
                self._cursor = (self._cursor + i) % n
                return cand
        return path

    def hot(self, plane: int, ev: int) -> None:
        """A SACK's trigger packet on (plane, ev) came back ECN-marked: its EV is set
        aside for a round (mrc_lb)."""
        path = self.by_ev.get((plane, ev))
        if path is not None:
            self.lb.hot(path, len(self._active))

    def _proven(self, path: Path) -> None:
        """Something sent on `path` came back (an acknowledgement or a probe's answer)."""
        self.acks += 1
        self.plane_acks[path.plane] += 1
        path.acked_at = self.acks

    def acked(self, path: Path) -> None:
        self._proven(path)
        if path.state is EvState.UNKNOWN:
            path.state = EvState.GOOD

    def retire(self, path: Path, now: float) -> bool:
        """A loss on `path`: ASSUMED_BAD at once, unless the floor forbids (False); on a
        multi-plane connection, its plane's other EVs too if the plane looks lost."""
        if not self._retire(path, now):
            return False
        if self._multiplane and self._plane_lost(path.plane):
            self._lose_plane(path.plane, now)
        return True

    def _lose_plane(self, plane: int, now: float) -> None:
        """Presume `plane` lost: its usable EVs retire (the floor kept), probed at once."""
        self.planes_lost += 1
        self.presumed += self._retire_plane(plane, now)

    def take_presumed(self) -> list[Path]:
        """The EVs presumed lost with their plane since the last call."""
        out, self.presumed = self.presumed, []
        return out

    def _watch_planes(self, now: float) -> None:
        """(every poll) A plane whose acknowledgements have not moved for PLANE_SILENCE
        of the probe interval, while the other planes' moved at PLANE_MOVES polls since
        (the peer alive: not the whole connection stalled), is presumed lost."""
        seen = self._plane_moved
        if not seen:
            seen.extend((n, now, 0) for n in self.plane_acks)
            return
        for plane, n in enumerate(self.plane_acks):
            if n != seen[plane][0]:
                self._moves += 1
                seen[plane] = (n, now, self._moves)
                self._judged.discard(plane)
        silence = PLANE_SILENCE * self.probe_interval_s
        for plane, (_, since, moves) in enumerate(seen):
            if (plane in self._judged or now - since < silence
                    or self._moves - moves < PLANE_MOVES):
                continue
            self._judged.add(plane)  # once per silence
            if any(p.plane == plane for p in self._active):
                self._lose_plane(plane, now)

    def _retire(self, path: Path, now: float) -> bool:
        if path.state not in USABLE or len(self._active) <= self.min_active:
            return False
        path.state = EvState.ASSUMED_BAD
        path.retirements += 1
        self.retirements += 1
        path.retired_at = self.acks
        path.probe_due, path.probe_out, path.probes_missed = now + self.probe_interval_s, False, 0
        self._active.remove(path)
        return True

    def _plane_lost(self, plane: int) -> bool:
        """`PLANE_EVIDENCE` EVs of `plane` retired after its latest acknowledgement, and
        another plane acknowledged since (so the peer is alive: not a stall of the whole
        connection)."""
        last = max(p.acked_at for p in self.paths if p.plane == plane)
        if max(p.acked_at for p in self.paths if p.plane != plane) <= last:
            return False
        dead = sum(1 for p in self.paths if p.plane == plane and p.state not in USABLE
                   and p.retired_at > last)
        return dead >= PLANE_EVIDENCE

    def plane_down(self, plane: int) -> bool:
        """Every EV of `plane` retired (a plane lost, or this connection never got through)."""
        evs = [p for p in self.paths if p.plane == plane]
        return bool(evs) and all(p.state not in USABLE for p in evs)

    def retire_plane(self, plane: int, now: float) -> int:
        """Start `plane`'s EVs retired (the floor kept), to be probed at once: a new
        connection to a peer whose plane an earlier one lost. How many it retired."""
        return len(self._retire_plane(plane, now))

    def _retire_plane(self, plane: int, now: float) -> list[Path]:
        """Retire `plane`'s usable EVs (the floor kept), each probed at once; the retired."""
        mine = [p for p in self._active if p.plane == plane]  # a copy: _retire edits _active
        out = [p for p in mine if self._retire(p, now)]
        for path in out:
            path.probe_due = now
        return out

    def probes_due(self, now: float) -> list[Path]:
        """The retired EVs to probe now (each counted as sent); a probe still unanswered
        counts as missed, and `probe_retries` misses in a row deny the EV. On a
        multi-plane connection, first looks for a silent plane."""
        if self._multiplane:
            self._watch_planes(now)
        elif len(self._active) == len(self.paths):  # none retired: nothing to probe
            return []
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
        self._proven(path)  # an answer proves the path both ways, as an acknowledgement does
        path.state, path.probe_out, path.rtt_s = EvState.GOOD, False, rtt_s
        self._active.append(path)
        return True

    def next_probe(self) -> float | None:
        if len(self._active) == len(self.paths):
            return None
        due = [p.probe_due for p in self.paths if p.state not in USABLE]
        return min(due) if due else None

    def by_state(self) -> dict[str, int]:
        out = {s.value: 0 for s in EvState}
        for p in self.paths:
            out[p.state.value] += 1
        return out
