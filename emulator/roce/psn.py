"""24-bit packet sequence number arithmetic.

PSNs wrap at 2**24. Two PSNs are compared by their signed distance, which
is meaningful while fewer than 2**23 packets are in flight (IBTA 9.7.1).
"""

from __future__ import annotations

PSN_BITS = 24
PSN_MOD = 1 << PSN_BITS
PSN_MASK = PSN_MOD - 1
_HALF = PSN_MOD >> 1


def psn_add(psn: int, n: int) -> int:
    return (psn + n) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """Signed distance a - b in PSN space, in [-2**23, 2**23)."""
    return ((a - b + _HALF) & PSN_MASK) - _HALF
