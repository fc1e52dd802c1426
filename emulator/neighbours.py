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

Most of those entries need not count at all. The kernel exempts permanent
entries from the limit (and from garbage collection), and rocelab knows both
ends of every point-to-point wire: their MACs are planned, an unnumbered
peer's link-local address is the EUI-64 of its MAC, a numbered peer's address
is planned. So `realize` pins those (`pins`): a routed fabric's wires then need
no dynamic entry, and an 80-router, 1,024-link fabric fits in the default
limit of 1,024. What is left to count is what rocelab cannot know in advance:
hosts of one L2 segment resolving each other. A port set down loses its
permanent entries (the kernel flushes them), so healing one pins them again.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from . import rundirs, state
from .errors import HostLimitError
from .paths import RUN_ROOT
from .plan import Node, Plan
from .spec import Addressing, FabricMode

FAMILIES = ("ipv4", "ipv6")
NAMES = {"ipv4": "IPv4 (ARP)", "ipv6": "IPv6"}
SYSCTL = "/proc/sys/net/{family}/neigh/default/gc_thresh3"  # unit tests: a directory of theirs
STATS = {"ipv4": "/proc/net/stat/arp_cache", "ipv6": "/proc/net/stat/ndisc_cache"}
HEADROOM = 1.25  # raise to this much more than needed: hosts add entries of their own


class Pin(NamedTuple):
    """A permanent neighbour entry: on `port`, `address` is at `mac`."""

    family: str  # ipv4 | ipv6
    port: str
    address: str
    mac: str


def link_local(mac: str) -> str:
    """The EUI-64 IPv6 link-local address the kernel derives from a MAC (addr_gen_mode 0)."""
    b = bytes.fromhex(mac.replace(":", ""))
    eui = bytes([b[0] ^ 0x02]) + b[1:3] + b"\xff\xfe" + b[3:]
    return str(ipaddress.IPv6Address(b"\xfe\x80" + bytes(6) + eui))


def pins(plan: Plan, node: Node, ports: Iterable[str] | None = None) -> list[Pin]:
    """The permanent entries a node's point-to-point wires need (all ports, or `ports`):
    an unnumbered fabric peer's link-local, a numbered peer's IPv4 address. Bridged
    ports (one segment, many neighbours) get none."""
    out = []
    for port in node.interfaces:
        if port.bridged or (ports is not None and port.name not in ports):
            continue
        peer = plan.node(port.peer).interface(port.peer_ifname)
        if peer.bridged:
            continue
        if port.fabric and plan.routed and plan.addressing is Addressing.UNNUMBERED:
            out.append(Pin("ipv6", port.name, link_local(peer.mac), peer.mac))
        if peer.address and port.address:
            out.append(Pin("ipv4", port.name, peer.address.split("/")[0], peer.mac))
    return out


def pinned(plan: Plan) -> dict[str, int]:
    """Permanent entries the lab holds once up: its pins, and on an unnumbered fabric
    zebra's own (169.254.0.1 per BGP port: IPv4 routes over IPv6 next hops)."""
    count = {fam: 0 for fam in FAMILIES}
    for node in plan.nodes:
        for pin in pins(plan, node):
            count[pin.family] += 1
    if plan.routed and plan.addressing is Addressing.UNNUMBERED:
        count["ipv4"] += 2 * sum(1 for link in plan.links if link.fabric)
    return count


def needed(plan: Plan) -> dict[str, int]:
    """Dynamic (counted) neighbour entries the lab needs once converged and every host has
    reached every other: what its pins do not cover."""
    hosts = len(plan.hosts)
    if plan.fabric is FabricMode.L3:
        return {"ipv4": 0, "ipv6": 0}  # every wire pinned, hosts' IPv6 off
    return {"ipv4": hosts * (hosts - 1), "ipv6": 0}  # one segment: every host resolves every other


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


def counted_in_use() -> dict[str, int]:
    """Entries counted against the limit now: the kernel's count less the permanent
    entries the running labs recorded (`pinned`, exempt from the limit)."""
    used = in_use()
    for lab in state.known_labs():
        record = (state.read(lab) or {}).get("neigh_pinned", {})
        for fam in FAMILIES:
            used[fam] = max(0, used[fam] - int(record.get(fam, 0)))
    return used


def check(plan: Plan) -> None:
    """HostLimitError (exit 12) if the lab would overflow a neighbour table."""
    need, have, used = needed(plan), limits(), counted_in_use()
    for fam in FAMILIES:  # a lab needing none adds nothing to a table others filled
        if need[fam] and used[fam] + need[fam] > have[fam]:
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


def _lock_path() -> Path:
    return record_path().parent  # the run root itself: no lock file left lying about


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """The record's read-modify-write, one process at a time (two `up`s, an `up` and the
    last `down`): an exclusive flock on the run root directory (the record itself is
    replaced by a rename, so it cannot carry the lock)."""
    rundirs.make_dirs(_lock_path(), rundirs.RUN_ROOT_MODE)
    fd = os.open(_lock_path(), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd closes
        yield
    finally:
        os.close(fd)


def raise_for(plan: Plan) -> dict[str, int]:
    """Raise gc_thresh3 (and gc_thresh2 to match) where the lab needs it; the first
    originals are recorded, with the values rocelab wrote, so the last `down` restores
    them (unless someone changed them since). Returns what was raised."""
    need = needed(plan)
    with _locked():
        have, used, record = limits(), counted_in_use(), _load()  # corrupt: exit 12
        raised = {}
        for fam in FAMILIES:
            want = fit(used[fam] + need[fam])
            if want <= have[fam]:
                continue
            thresh2 = _read_int(_sysctl2(fam))
            entry = record.setdefault(fam, {"gc_thresh3": have[fam], "gc_thresh2": thresh2})
            entry["set"] = {"gc_thresh3": want, "gc_thresh2": max(thresh2, want // 2)}
            _save(record)  # before the write: a crash right after still restores
            _write(_sysctl2(fam), entry["set"]["gc_thresh2"])
            _write(SYSCTL.format(family=fam), want)
            raised[fam] = want
    return raised


def restore() -> list[str]:
    """Put back the recorded originals and forget them (the last lab is gone). A value
    changed since rocelab wrote it is left as it is. One line for each thing not done."""
    with _locked():
        return _restore()


def restore_if_idle() -> list[str]:
    """restore(), if no lab is left on the host (asked under the record's lock). Without a
    record there is nothing to restore, and every lab's `down` skips asking the kernel."""
    with _locked():
        if not record_path().exists():
            return []
        return [] if state.known_labs() else _restore()


def _restore() -> list[str]:
    try:
        record = _load()
    except CorruptRecord as e:
        return [str(e)]
    notes = []
    for fam, orig in record.items():
        for key, path in (("gc_thresh3", SYSCTL.format(family=fam)), ("gc_thresh2", _sysctl2(fam))):
            wrote = orig.get("set", {}).get(key)  # None: a record of an older rocelab
            now = _read_int(path)
            if wrote is not None and now != wrote:
                notes.append(f"net.{fam}.neigh.default.{key} is {now}, not the {wrote} rocelab "
                             f"set: changed since, so left as it is (it was {orig[key]} before)")
            else:
                _write(path, orig[key])
    record_path().unlink(missing_ok=True)
    return notes


def _sysctl2(fam: str) -> str:
    return SYSCTL.format(family=fam).replace("gc_thresh3", "gc_thresh2")


def _write(path: str, value: int) -> None:
    with open(path, "w") as f:
        f.write(str(value))


class CorruptRecord(HostLimitError):
    """The record of the originals cannot be read: it is moved aside, nothing restored."""


def _load() -> dict[str, dict]:
    """The record ({} if none); a corrupt one is kept aside and CorruptRecord raised."""
    try:
        text = record_path().read_text()
    except FileNotFoundError:
        return {}
    try:
        record = json.loads(text)
        _check_record(record)
        return record
    except ValueError as e:
        aside = record_path().with_suffix(".json.corrupt")
        record_path().replace(aside)
        raise CorruptRecord(
            f"the neighbour-limit record {record_path()} is corrupt ({e}); kept as {aside}, "
            "nothing restored: set net.ipv4/ipv6.neigh.default.gc_thresh3 (now "
            f"{'/'.join(str(v) for v in limits().values())}) and gc_thresh2 back by hand "
            "(the kernel's defaults: 1024 and 512)") from None


def _check_record(record: object) -> None:
    """ValueError unless {family: {"gc_thresh3": int, "gc_thresh2": int[, "set": {...}]}}."""
    if not isinstance(record, dict) or not set(record) <= set(FAMILIES):
        raise ValueError("not a mapping of ipv4/ipv6")
    for entry in record.values():
        sets = entry.get("set", {}) if isinstance(entry, dict) else None
        if not isinstance(sets, dict) or not all(
                isinstance(d.get(k), int) for d in (entry, *([sets] if sets else []))
                for k in ("gc_thresh3", "gc_thresh2")):
            raise ValueError("an entry lacks integer gc_thresh3/gc_thresh2")


def _save(record: dict[str, dict]) -> None:
    rundirs.make_dirs(record_path().parent, rundirs.RUN_ROOT_MODE)
    tmp = record_path().with_suffix(".tmp")
    tmp.write_text(json.dumps(record) + "\n")
    tmp.replace(record_path())  # atomic: a crash never leaves half a record
