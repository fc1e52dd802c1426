"""A trace replay's plots: handoff CDF, offered vs carried load, load per spine and rail."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import plots


def draw(block: dict[str, Any], out: Path) -> list[Path]:
    v = block["verdict"]
    paths = []
    fig, ax = plots._figure()
    hand = sorted(r["handoff_s"] * 1e3 for r in block["requests"] if not r["error"])
    ax.set_title(f"Handoff CDF: {v['attainment']:.1%} within {v['budget_s'] * 1e3:g} ms")
    if hand:
        ax.step(hand, [(i + 1) / len(hand) for i in range(len(hand))], where="post", lw=1.8)
        ax.axvline(v["budget_s"] * 1e3, color="#d62728", ls="--", label="budget")
        ax.set_xscale("log" if hand[-1] > 50 * max(hand[0], 1e-3) else "linear")
        ax.legend()
    ax.set_xlabel("handoff, real-equivalent (ms)")
    ax.set_ylabel("fraction of requests")
    paths.append(plots._save(fig, out / "replay_handoff_cdf.png"))
    fig, ax = plots._figure()
    load = v["load"]
    ax.set_title("Offered vs carried load (real-equivalent)")
    ax.step(load["t_s"], load["offered_gbps"], where="post", label="offered (arrivals)")
    ax.step(load["t_s"], load["carried_gbps"], where="post", label="carried (moving)")
    ax.set_xlabel("trace time (s)")
    ax.set_ylabel("Gbit/s")
    ax.legend()
    paths.append(plots._save(fig, out / "replay_load.png"))
    fig, ax = plots._figure()
    bars = {**v["spines"], **{f"rail {k}": b for k, b in v["rails"].items()}}
    ax.set_title("KV bytes per spine" + (" and rail" if v["rails"] else ""))
    if bars:
        ax.bar(list(bars), [b / 1e9 for b in bars.values()], color=plots.PALETTE[0])
        ax.set_ylabel("GB (real)")
    else:
        plots._empty(ax, "no per-spine data")
    paths.append(plots._save(fig, out / "replay_spine_load.png"))
    return paths
