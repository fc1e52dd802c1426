"""report.md beside results.json: the headline numbers a person reads first."""

from __future__ import annotations

from typing import Any


def _fmt(v: Any, unit: str = "", scale: float = 1.0, nd: int = 3) -> str:
    return "-" if v is None else f"{v * scale:.{nd}f}{unit}"


def report_md(r: dict[str, Any]) -> str:
    d = r["dilation"]
    rate = r.get("link_rate_bps")
    lines = [f"# {r['experiment']} on lab {r['lab']}", ""]
    if rate:
        lines.append(f"Links {r['declared_speed_bps'] / 1e9:g} Gbit/s emulated at {rate / 1e6:g} Mbit/s "
                     f"(time dilation D = {d:g}); real-equivalent times are wall / D.")
    s = r["steady"]
    lines += ["", f"- integrity: {'ok' if r['integrity_ok'] else 'FAILED'}",
              f"- steady state {s['from_s']:.2f}-{s['to_s']:.2f} s: Jain fairness {s['jain']:.3f}"]
    if rate:
        p = r["pfc"]
        lines += [f"- PFC pauses: {p['pauses']} (reaction p50 {p['reaction_us_p50']} us, "
                  f"p99 {p['reaction_us_p99']} us)", f"- lossless-class drops: {r['lossless_drops']}"]
    lines += ["", "## Flows", "", "| flow | src -> dst | bytes | FCT (wall) | FCT (real-equiv) | "
              "goodput | CNPs | retransmitted | integrity |", "|---|---|---|---|---|---|---|---|---|"]
    for f in r["flows"]:
        lines.append(f"| {f['name']} | {f['src']} -> {f['dst']} | {f['bytes']} | {_fmt(f['fct_s'], ' s')} | "
                     f"{_fmt(f['fct_real_s'], ' ms', 1e3)} | {_fmt(f['goodput_bps'], ' Mbit/s', 1e-6, 1)} | "
                     f"{f['cnps_rx']} | {f['retransmitted_packets']} | "
                     f"{'ok' if f['integrity_ok'] else f['error']} |")
    if r["events"]:
        lines += ["", "## Events", "", "| t (s) | action | detail | detect | converged |",
                  "|---|---|---|---|---|"]
        for e in r["events"]:
            conv = e.get("convergence") or {}
            detail = e.get("name") or e.get("target") or ", ".join(f"{k}={v}" for k, v in e.items()
                                                 if k in ("node", "host", "enabled", "profile"))
            lines.append(f"| {e['t_s']:.3f} | {e['kind']} {e.get('action', '')} | {detail} | "
                         f"{_fmt(conv.get('detect_s'), ' s')} | {_fmt(conv.get('converge_s'), ' s')} |")
    return "\n".join(lines) + "\n"
