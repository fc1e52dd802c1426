"""Which hosts serve a request, and what each decode host already holds.

Placement picks a (prefill, decode) pair from the pools the topology's roles give:
round-robin over each pool; least-loaded (the hosts with the fewest bytes still to
move, ties to the host given fewer requests); prefix-affinity (the decode host where the
request would be done first: the bytes it still has to move plus what this request must
move there, its prompt less the prefix that host's cache holds -- so a host holding the
prefix wins unless it is busier by more than the prefix's bytes). Each decode host has
an LRU prefix cache of whole 512-token blocks, sized in bytes: a request moves only
the tokens its decode host does not already hold.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import RocelabError
from .reader import Request

BLOCK_TOKENS = 512  # Mooncake's hash_ids: one id per 512 tokens of prompt
PLACEMENTS = ("round-robin", "least-loaded", "prefix-affinity")


class PrefixCache:
    """One decode host's cache: block ids, least recently used first, at most
    `capacity` bytes of `block_bytes` each (capacity 0: no cache)."""

    def __init__(self, capacity: int, block_bytes: int):
        self.slots = capacity // block_bytes if block_bytes > 0 else 0
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def hits(self, blocks: Sequence[int]) -> int:
        """How many of `blocks`' leading blocks are held (a prefix: a later block's KV
        depends on every block before it)."""
        return sum(1 for _ in itertools.takewhile(self._blocks.__contains__, blocks))

    def admit(self, blocks: Sequence[int]) -> None:
        """The request's blocks now live here, most recent last; the oldest go."""
        if not self.slots:
            return
        for b in blocks:
            self._blocks[b] = None
            self._blocks.move_to_end(b)
        while len(self._blocks) > self.slots:
            self._blocks.popitem(last=False)

    def __len__(self) -> int:
        return len(self._blocks)


@dataclass(frozen=True)
class Placed:
    """A request placed: its hosts, the prefix blocks its decode host held, the tokens to move."""

    request: Request
    prefill: str
    decode: str
    cached_blocks: int
    tokens: int  # input tokens whose KV crosses the fabric (all minus the cached prefix)

    @property
    def cached_tokens(self) -> int:
        return self.request.input_tokens - self.tokens


Load = Callable[[str], int]  # host -> (real) bytes it still has to move


class Placer:
    """Places requests one at a time, in arrival order, keeping every decode host's cache."""

    def __init__(self, how: str, prefill: Sequence[str], decode: Sequence[str],
                 cache_bytes: int = 0, block_bytes: int = 1, load: Load | None = None):
        if how not in PLACEMENTS:
            raise RocelabError(f"--placement: unknown {how!r}; allowed: {', '.join(PLACEMENTS)}")
        if not prefill or not decode:
            raise RocelabError("replay needs prefill and decode hosts (the topology's hosts.roles)")
        self.how, self.prefill, self.decode = how, list(prefill), list(decode)
        self.caches = {d: PrefixCache(cache_bytes, block_bytes) for d in self.decode}
        self.block_bytes = block_bytes
        self.load: Load = load or (lambda _h: 0)
        self.assigned = dict.fromkeys([*self.prefill, *self.decode], 0)  # ties go to the idler
        self._n = 0

    def place(self, req: Request) -> Placed:
        i, self._n = self._n, self._n + 1
        if self.how == "round-robin":
            src, dst = self.prefill[i % len(self.prefill)], self.decode[i % len(self.decode)]
        else:
            src = min(self.prefill, key=lambda h: (self.load(h), self.assigned[h], h))
            dst = min(self.decode, key=self._rank(req))
        self.assigned[src] += 1
        self.assigned[dst] += 1
        cache = self.caches[dst]
        hits = cache.hits(req.blocks)
        cache.admit(req.blocks)
        tokens = max(0, req.input_tokens - hits * BLOCK_TOKENS)
        return Placed(req, src, dst, hits, tokens)

    def _rank(self, req: Request) -> Callable[[str], tuple[int, int, str]]:
        if self.how == "prefix-affinity":  # where it would be done first: queue + what must move
            per_token = self.block_bytes // BLOCK_TOKENS
            return lambda h: (self.load(h) + per_token * max(
                0, req.input_tokens - self.caches[h].hits(req.blocks) * BLOCK_TOKENS),
                self.assigned[h], h)
        return lambda h: (self.load(h), self.assigned[h], h)
