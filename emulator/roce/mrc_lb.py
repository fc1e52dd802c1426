"""Which EV a connection's next new packet goes on: recycled entropy (UET's REPS).

UET 1.0's packet spraying load balancer REPS (Recycled Entropy Packet Spraying;
`UecMpReps` in ultraethernet/uet-htsim's uec_mp.cpp) keeps a FIFO of EVs whose
packets were acknowledged unmarked: a new packet goes on the oldest of them (the
EV is "recycled"), and only when none is left on an EV not tried lately (REPS:
a random one; here the EV set's round robin, see `EvSet.next`). An ECN-marked
acknowledgement does not recycle its EV. Sending on what came back makes every
EV self-clocked: an EV keeps the packets in flight it started with, so it carries
them at the rate its path returns them, and an EV hashed onto a link the
connection shares with more than its share (a hot spine) builds a queue there
and is sent on less often. A round robin sends the same number of packets on
every EV whatever the hash made of them.

Where this departs from REPS: one SACK acknowledges up to `ack_every` packets,
each recycling the EV it was sent on (REPS: one per ACK); the SACK's trigger
packet is the one whose ECN mark it echoes, and an EV whose trigger packet came
back marked is set aside for `aside_rounds` rounds of picks (REPS: just not
recycled), so neither recycling nor the round robin uses it meanwhile. There is
no random exploration: an entry not recycled (set aside, retired, or pushed out
of the FIFO) leaves a pick to the round robin over every usable EV, which is how
a set-aside EV returns, and a growing window's extra packets go there too (REPS
explores after a timeout's freezing mode, which rocelab's per-EV loss detection
and retirement replace). The same acknowledgements give the same choices.

Tried and not kept (docs/mrc.md "Collisions"): an exploration share that passed
over recycled entries (it moves packets in flight from the EVs returned most
often to every EV alike: in a few hundred round trips a slow EV's share is back
at the round robin's), and setting aside an EV whose trigger packet's RTT was
past NSCC's target or 1.2x the running mean (on the shaped lab the window's
queue at the first hop, common to every EV, put half the SACKs past the
target; neither delay rule measured better than ECN alone).
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol


class _Ev(Protocol):
    state: Any
    aside_until: int


class Recycler:
    """The recycled-EV FIFO of one connection and its set-aside clock (in picks)."""

    def __init__(self, size: int, usable: tuple[Any, ...], aside_rounds: int = 1):
        self.fresh: deque[Any] = deque(maxlen=max(1, size))
        self.usable, self.aside_rounds = usable, aside_rounds
        self.picks = 0  # new packets placed so far (the set-aside clock)
        self.recycled = self.set_aside = 0

    def pick(self) -> Any | None:
        """The oldest recycled EV still usable and not set aside; None: none left,
        the caller's round robin chooses."""
        self.picks = picks = self.picks + 1
        fresh, usable = self.fresh, self.usable
        while fresh:
            ev = fresh.popleft()
            if ev.state in usable and ev.aside_until <= picks:
                self.recycled += 1
                return ev
        return None

    def hot(self, ev: _Ev, active: int) -> None:
        """`ev`'s packet came back ECN-marked or queued past the target: set it aside
        for `aside_rounds` rounds of `active` picks."""
        ev.aside_until = self.picks + self.aside_rounds * active
        self.set_aside += 1

    def aside(self, ev: _Ev) -> bool:
        return ev.aside_until > self.picks
