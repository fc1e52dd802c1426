"""`rocelab top`'s MRC section: per MRC connection its EVs good and retired, retirements,
TRIM NACKs and how evenly it sprays (the busiest and the idlest path's share of its bytes).

Pure, like top.py: rows from two scrapes' Index (the rocelab_mrc_* series of the engine
collector), and the rich panel. Shares are of the bytes sprayed between the two scrapes
when there are two and the connection moved data, else of the bytes since it started.
One row per connection: the sender's (each end reports its own, with its own id).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Protocol

from rich.panel import Panel
from rich.table import Table
from rich.text import Text

RETIRED = ("assumed_bad", "denied")
ROWS = 8  # connections shown, most retired EVs first


class Index(Protocol):
    """What top.Index gives: one scrape's samples by name, labels (without lab) -> value."""

    def get(self, name: str) -> dict[tuple[tuple[str, str], ...], float]: ...


@dataclass
class MrcRow:
    node: str
    conn: str
    flow: str
    good: int
    retired: int  # assumed_bad + denied
    evs: int
    retirements: float
    trim_nacks: float  # sent + received
    busiest: tuple[str, float] | None  # (ev, share of the connection's bytes)
    idlest: tuple[str, float] | None
    paths: int


def rows(p: Index | None, c: Index) -> list[MrcRow]:
    conns: dict[tuple[str, str, str], dict[str, str]] = {}
    states: dict[tuple[str, str, str], dict[str, float]] = defaultdict(dict)
    for key, v in c.get("rocelab_mrc_evs").items():
        d = dict(key)
        k = (d["node"], d["conn"], d.get("flow", ""))
        conns[k] = d
        states[k][d["state"]] = v
    out = []
    for k in _senders(conns):
        st = states[k]
        share = _shares(p, c, k)
        out.append(MrcRow(
            k[0], k[1], k[2], int(st.get("good", 0)), int(sum(st.get(s, 0) for s in RETIRED)),
            int(_one(c, "rocelab_mrc_evs_configured", k) or sum(st.values())),
            _one(c, "rocelab_mrc_ev_retirements_total", k),
            _one(c, "rocelab_mrc_trim_nacks_sent_total", k)
            + _one(c, "rocelab_mrc_trim_nacks_received_total", k),
            max(share.items(), key=lambda kv: kv[1]) if share else None,
            min(share.items(), key=lambda kv: kv[1]) if share else None, len(share)))
    out.sort(key=lambda r: (-r.retired, r.flow, r.conn))
    return out[:ROWS]


def _senders(conns: dict[tuple[str, str, str], dict[str, str]]
             ) -> list[tuple[str, str, str]]:
    """The senders' entries (node == src: each end has its own connection id, and the
    receiver's has no EVs); a flow whose sender does not report keeps its other end's."""
    sending = {d.get("flow", "") for (node, _, _), d in conns.items() if node == d.get("src")}
    return sorted(k for k, d in conns.items() if k[0] == d.get("src") or k[2] not in sending)


def _mine(key: tuple[tuple[str, str], ...], k: tuple[str, str, str]) -> bool:
    d = dict(key)
    return (d.get("node"), d.get("conn"), d.get("flow", "")) == k


def _one(c: Index, name: str, k: tuple[str, str, str]) -> float:
    return sum(v for key, v in c.get(name).items() if _mine(key, k))


def _shares(p: Index | None, c: Index, k: tuple[str, str, str]) -> dict[str, float]:
    """Each EV's share of the connection's bytes: between the scrapes when it moved data
    in between, else since it started."""
    now = _path_bytes(c, k)
    before = _path_bytes(p, k) if p is not None else {}
    moved = {ev: max(0.0, b - before.get(ev, 0.0)) for ev, b in now.items()}
    use = moved if before and sum(moved.values()) > 0 else now
    total = sum(use.values())
    return {ev: b / total for ev, b in use.items()} if total else {}


def _path_bytes(c: Index, k: tuple[str, str, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, v in c.get("rocelab_mrc_path_bytes_total").items():
        d = dict(key)
        if _mine(key, k):
            ev = d["ev"] if d.get("plane", "0") == "0" else f"{d['ev']}/p{d['plane']}"
            out[ev] = out.get(ev, 0.0) + v
    return out


def panel(mrc: list[MrcRow]) -> Panel:
    table = Table(expand=True, show_edge=False, box=None, padding=(0, 1))
    for col in ("connection", "EVs good", "retired", "retirements", "trim NACKs",
                "busiest path", "idlest path"):
        table.add_column(col, justify="left" if col == "connection" else "right")
    for r in mrc:
        fair = 1 / r.paths if r.paths else 0.0
        table.add_row(f"{r.flow} {r.conn}", f"{r.good}/{r.evs}",
                      Text(str(r.retired), style="red" if r.retired else ""),
                      f"{r.retirements:.0f}", f"{r.trim_nacks:.0f}",
                      _path(r.busiest, fair, hot=True), _path(r.idlest, fair, hot=False))
    return Panel(table, title=f"MRC connections ({len(mrc)})", title_align="left")


def _path(p: tuple[str, float] | None, fair: float, hot: bool) -> Text:
    if p is None:
        return Text("-")
    ev, share = p
    off = (share >= 2 * fair) if hot else (share <= fair / 2)
    return Text(f"EV {ev} {100 * share:.1f}%", style="yellow" if off and fair else "")
