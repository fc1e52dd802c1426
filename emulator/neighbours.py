"""The neighbour budget: ARP and IPv6 neighbour entries are one table per host.

Every namespace's neighbour entries count against the same host-wide limit,
`net.ipv{4,6}.neigh.default.gc_thresh3` (1024 by default), writable only in the
initial namespace. An unnumbered fabric needs one IPv6 neighbour per fabric
link end: 16 spines x 64 leaves is 2,048, the table overflows ("neighbor table
overflow"), neighbour discovery fails, BGP stays down -- and every other lab on
the host suffers too. So `up` counts what a plan needs against what the host
has left and refuses, naming the sysctl and the value that would fit. Only
with `--raise-neigh-limit` does it raise the limit, recording the original in
the run root, and the `down` that leaves no lab puts it back (a crash loses
nothing: the next `down` restores from the record).
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import HostLimitError
from .paths import RUN_ROOT
from .plan import Plan
from .spec import Addressing, FabricMode

FAMILIES = ("ipv4", "ipv6")
NAMES = {"ipv4": "IPv4 (ARP)", "ipv6": "IPv6"}
SYSCTL = "/proc/sys/net/{family}/neigh/default/gc_thresh3"
STATS = {"ipv4": "/proc/net/stat/arp_cache", "ipv6": "/proc/net/stat/ndisc_cache"}
HEADROOM = 1.25  # raise to this much more than needed: hosts add entries of their own


def needed(plan: Plan) -> dict[str, int]:
    """Neighbour entries the lab needs once converged and every host has reached every other."""
    fabric = [link for link in plan.links if link.fabric]
    hosts = len(plan.hosts)
    v4 = v6 = 0
    if plan.routed and plan.addressing is Addressing.UNNUMBERED:
        v6 += 2 * len(fabric)  # BGP to the peer's link-local on both ends
    elif plan.routed:
        v4 += 2 * len(fabric)
    if plan.fabric is FabricMode.L3:
        v4 += 2 * hosts  # host -> its gateway, leaf -> the host
    else:
        v4 += hosts * (hosts - 1)  # one segment: every host resolves every other
    return {"ipv4": v4, "ipv6": v6}


def _read_int(path: str) -> int:
    with open(path) as f:
        return int(f.read().split()[0])


def limits() -> dict[str, int]:
    return {fam: _read_int(SYSCTL.format(family=fam)) for fam in FAMILIES}


def in_use() -> dict[str, int]:
    """Entries in each table now, over every namespace (the kernel's own count)."""
    out = {}
    for fam, path in STATS.items():
        try:
            with open(path) as f:
                f.readline()
                out[fam] = int(f.readline().split()[0], 16)
        except (OSError, IndexError, ValueError):
            out[fam] = 0
    return out


def check(plan: Plan) -> None:
    """HostLimitError (exit 12) if the lab would overflow a neighbour table."""
    need, have, used = needed(plan), limits(), in_use()
    for fam in FAMILIES:
        if used[fam] + need[fam] > have[fam]:
            fits = fit(used[fam] + need[fam])
            raise HostLimitError(
                f"lab {plan.lab} needs {need[fam]} {NAMES[fam]} neighbour entries and "
                f"{used[fam]} are in use, but net.{fam}.neigh.default.gc_thresh3 is {have[fam]} "
                f"(one table for every namespace on this host): set it to at least {fits}, or "
                "run `rocelab up --raise-neigh-limit`, which does and restores it at the last "
                "`down`; nothing was created")


def fit(entries: int) -> int:
    return int(entries * HEADROOM) + 1


def record_path() -> Path:
    return RUN_ROOT / "neigh-limits.json"  # beside every lab's run dir (a file: not a lab)


def raise_for(plan: Plan) -> dict[str, int]:
    """Raise gc_thresh3 (and gc_thresh2 to match) where the lab needs it; the first
    originals are recorded so the last `down` restores them. Returns what was raised."""
    need, have, used = needed(plan), limits(), in_use()
    record = _load()
    raised = {}
    for fam in FAMILIES:
        want = fit(used[fam] + need[fam])
        if want <= have[fam]:
            continue
        thresh2 = _read_int(_sysctl2(fam))
        record.setdefault(fam, {"gc_thresh3": have[fam], "gc_thresh2": thresh2})
        _save(record)  # before the write: a crash right after still restores
        _write(_sysctl2(fam), max(thresh2, want // 2))
        _write(SYSCTL.format(family=fam), want)
        raised[fam] = want
    return raised


def restore() -> dict[str, int]:
    """Put back the recorded originals and forget them (the last lab is gone)."""
    record = _load()
    for fam, orig in record.items():
        _write(SYSCTL.format(family=fam), orig["gc_thresh3"])
        _write(_sysctl2(fam), orig["gc_thresh2"])
    record_path().unlink(missing_ok=True)
    return {fam: orig["gc_thresh3"] for fam, orig in record.items()}


def _sysctl2(fam: str) -> str:
    return SYSCTL.format(family=fam).replace("gc_thresh3", "gc_thresh2")


def _write(path: str, value: int) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def _load() -> dict[str, dict[str, int]]:
    try:
        return json.loads(record_path().read_text())
    except (OSError, ValueError):
        return {}


def _save(record: dict[str, dict[str, int]]) -> None:
    record_path().parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    record_path().write_text(json.dumps(record) + "\n")
