"""The topology picture: spines, leaves, hosts, link speeds; the hottest links coloured.

Used by run reports (coloured by the run's traffic) and by `rocelab graph`
(plain, or coloured from a results.json). PNG or SVG by file suffix.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import colormaps  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.cm import ScalarMappable  # noqa: E402
from matplotlib.colors import LinearSegmentedColormap, Normalize  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402
from matplotlib.ticker import PercentFormatter  # noqa: E402

from .. import outfile
from ..plan import Kind, Link, Plan  # noqa: E402
from ..spec import Role  # noqa: E402

ROW_Y = {Kind.SUPERSPINE: 3.0, Kind.SPINE: 2.0, Kind.LEAF: 1.0, Kind.HOST: 0.0}
COLOURS = {"superspine": "#0f2347", "spine": "#1f3b73", "leaf": "#2a7f62",
           Role.PREFILL.value: "#d9822b", Role.DECODE.value: "#7b4fa0"}
OTHER_ROLE = "#6b6b6b"  # a user's own host role (storage, ...)
CMAP = LinearSegmentedColormap.from_list(  # YlOrRd without its near-white end
    "busy", [colormaps["YlOrRd"](0.2 + 0.8 * i / 15) for i in range(16)])
IDLE = "#c7c7c7"


def _positions(plan: Plan) -> dict[str, tuple[float, float]]:
    """Hosts evenly spaced and grouped by (first) leaf; leaves over their hosts; spines
    spread over the leaves (3-tier: over their pod's), superspines over all."""
    pos, x = {}, 0.0
    leaves = plan.of_kind(Kind.LEAF)
    for leaf in leaves:
        hosts = [h for h in plan.hosts if h.leaf == leaf.name]
        if not hosts and any(leaf.name in h.leaves for h in plan.hosts):
            pos[leaf.name] = (x, ROW_Y[Kind.LEAF])  # a rail or second leaf of hosts drawn before
            x += 2.6 if plan.planes > 1 else 1.2  # room for the plane's own spines above
            continue
        for h in hosts:
            pos[h.name] = (x, ROW_Y[Kind.HOST])
            x += 1.0
        first = pos[hosts[0].name][0] if hosts else x
        pos[leaf.name] = ((first + x - 1.0) / 2 if hosts else x, ROW_Y[Kind.LEAF])
        x += 0.6 if hosts else 1.0  # a gap between leaf groups
    for kind, below in ((Kind.SPINE, Kind.LEAF), (Kind.SUPERSPINE, Kind.SPINE)):
        groups: dict[tuple[int | None, int | None], list] = {}  # (pod, plane): spines over theirs
        for n in plan.of_kind(kind):
            groups.setdefault((n.pod, n.plane), []).append(n)
        for group, members in groups.items():
            under = [pos[b.name][0] for b in plan.of_kind(below)
                     if group == (None, None) or (b.pod, b.plane) == group]
            lo, hi = min(under), max(under)
            for i, s in enumerate(members):
                pos[s.name] = (lo + (hi - lo) * (i + 0.5) / len(members), ROW_Y[kind])
    return pos


def utilisation(plan: Plan, load: dict[tuple[str, str], float], duration_s: float
                ) -> tuple[dict[Link, float], str]:
    """Per link: busier direction's share of the shaped line rate over the run, or,
    without a shaped rate or duration, its share of the busiest link's bytes."""
    raw = {link: max(load.get((link.a, link.a_ifname), 0.0), load.get((link.b, link.b_ifname), 0.0))
           for link in plan.links}
    cp = plan.congestion
    if cp and duration_s > 0:
        return {link: b * 8 / (cp.rate_of(link.speed_bps) * duration_s) for link, b in raw.items()}, \
            "link utilisation (busier direction, share of line rate)"
    top = max(raw.values(), default=0.0) or 1.0
    return {link: b / top for link, b in raw.items()}, "bytes sent, relative to the busiest link"


def _subtitle(plan: Plan) -> str:
    cp = plan.congestion
    shape = (f"{plan.shape()}, {len(plan.hosts)} hosts, {plan.addressing.value} eBGP")
    speeds = sorted({link.speed_bps for link in plan.links})
    rate = "/".join(f"{s / 1e9:g}G" for s in speeds)
    shaped = f", shaped at speed / D (time dilation D = {cp.dilation:g})" if cp else " (unshaped veths)"
    every = "every link " if len(speeds) == 1 else "links "
    return f"{shape}\n{every}{rate}{shaped}, MTU {plan.mtu}"


def _box(ax: Axes, xy: tuple[float, float], text: str, sub: str, colour: str, width: float,
         size: float) -> None:
    x, y = xy
    ax.add_patch(FancyBboxPatch((x - width / 2, y - 0.17), width, 0.34,
                                boxstyle="round,pad=0.02,rounding_size=0.08", fc=colour,
                                ec="white", lw=1.5, zorder=3))
    ax.text(x, y + 0.05, text, ha="center", va="center", color="white", fontsize=size,
            fontweight="bold", zorder=4)
    ax.text(x, y - 0.09, sub, ha="center", va="center", color="white", fontsize=size - 2,
            zorder=4)


def _links(ax: Axes, plan: Plan, pos, util: dict[Link, float] | None, norm: Normalize) -> None:
    hottest = sorted(util, key=lambda link: util[link], reverse=True)[:3] if util else []
    fabric_lw = 2.2 if sum(1 for link in plan.links if link.fabric) <= 32 else 0.9
    for link in plan.links:
        (x1, y1), (x2, y2) = pos[link.a], pos[link.b]
        u = util.get(link, 0.0) if util else 0.0
        busy = bool(util) and u > 0.005
        colour = CMAP(norm(u)) if busy else IDLE
        width = (fabric_lw if link.fabric else 1.6) + (3.5 * norm(u) if busy else 0.0)
        ax.plot([x1, x2], [y1, y2], color=colour, lw=width, zorder=2 if busy else 1,
                solid_capstyle="round")
        if link in hottest and busy:
            ax.text(x1 + (x2 - x1) * 0.55, y1 + (y2 - y1) * 0.55, f"{u:.0%}", fontsize=8,
                    ha="center", va="center", zorder=5,
                    bbox={"fc": "white", "ec": colour, "boxstyle": "round,pad=0.2"})


def draw(plan: Plan, path: Path, load: dict[tuple[str, str], float] | None = None,
         duration_s: float = 0.0, title: str | None = None) -> Path:
    with plt.rc_context({"svg.fonttype": "none"}):  # SVG keeps its text as text
        return _draw(plan, path, load, duration_s, title)


def _draw(plan: Plan, path: Path, load: dict[tuple[str, str], float] | None, duration_s: float,
          title: str | None) -> Path:
    pos = _positions(plan)
    xs = [x for x, _ in pos.values()]
    span = max(xs) - min(xs)
    fig, ax = plt.subplots(figsize=(max(8.5, 0.75 * span + 3.0), 5.4), dpi=110)
    util, what = utilisation(plan, load, duration_s) if load else (None, "")
    norm = Normalize(0, max(1.0, max(util.values(), default=0.0)) if util else 1.0)
    _links(ax, plan, pos, util, norm)
    longest = max(len(h.name) for h in plan.hosts) if plan.hosts else 6
    size = 8.5 if longest <= 6 else 7.5
    for node in plan.nodes:
        colour = COLOURS.get(node.role or node.kind.value, OTHER_ROLE)
        sub = f"AS{node.asn}" if node.asn else (node.address or "")
        _box(ax, pos[node.name], node.name, sub, colour, 1.2 if node.is_router else 0.92,
             9 if node.is_router else size)
    ax.set_xlim(min(xs) - 0.8, max(xs) + 0.8)
    ax.set_ylim(-0.3, 3.3 if plan.of_kind(Kind.SUPERSPINE) else 2.3)
    ax.axis("off")
    fig.suptitle(title or f"lab {plan.lab}", fontsize=12, fontweight="bold")
    ax.set_title(_subtitle(plan), fontsize=9, color="#444444")
    _legend(fig, ax, util, what, norm, {n.role or n.kind.value for n in plan.nodes})
    with outfile.open_fresh(path) as f:  # never through a link planted at the name
        fig.savefig(f, format=path.suffix[1:], dpi=110, bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)
    return path


def _legend(fig, ax: Axes, util: dict[Link, float] | None, what: str, norm: Normalize,
            present: set[str]) -> None:
    """`present`: the kinds and roles the picture shows (only those get a key)."""
    handles = [Line2D([], [], marker="s", ls="", ms=9, color=c, label=name)
               for name, c in COLOURS.items() if name in present]
    if present - set(COLOURS):
        handles.append(Line2D([], [], marker="s", ls="", ms=9, color=OTHER_ROLE,
                              label="/".join(sorted(present - set(COLOURS)))))
    handles.append(Line2D([], [], color=IDLE, lw=2.5, label="idle link" if util else "link"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02), fontsize=8.5,
              ncols=len(handles), frameon=False)
    if util:
        bar = fig.colorbar(ScalarMappable(norm, CMAP), ax=ax, fraction=0.025, pad=0.01,
                           format=PercentFormatter(1.0))
        bar.set_label(what, fontsize=8.5)
