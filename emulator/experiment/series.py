"""Pure numbers over cumulative series and sampled ports: rates between samples, bytes
and mean rates over a window, the longest time without progress, when flows even out
(Jain), and a port's utilisation and queue over a window.

A series is [(t, cumulative value)], t in wall seconds since the run's start: a flow's
bytes (sent, or delivered: completed messages), a port's tx bytes, pause frames or
queue depth (`PortSample["series"]`). `analysis` builds results.json from them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..metrics.snapshot import PortSample
from ..stats import jain, percentile

Series = Sequence[tuple[float, float]]


def rates(series: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """[(t, cumulative bytes)] -> [(t, bit/s)] between consecutive samples."""
    out = []
    for (t0, b0), (t1, b1) in zip(series, series[1:]):
        if t1 > t0:
            out.append((t1, (b1 - b0) * 8 / (t1 - t0)))
    return out


def bytes_between(series: Sequence[tuple[float, float]], t0: float, t1: float) -> float:
    """Bytes a cumulative series grew by within [t0, t1] (linear between samples)."""
    return _at(series, t1) - _at(series, t0)


def _at(series: Sequence[tuple[float, float]], t: float) -> float:
    if not series:
        return 0.0
    if t <= series[0][0]:
        return series[0][1]
    for (ta, ba), (tb, bb) in zip(series, series[1:]):
        if ta <= t <= tb:
            return ba + (bb - ba) * (t - ta) / (tb - ta) if tb > ta else bb
    return series[-1][1]


def mean_rate(series: Sequence[tuple[float, float]], t0: float, t1: float) -> float:
    return bytes_between(series, t0, t1) * 8 / (t1 - t0) if t1 > t0 else 0.0


def interruption(series: Series, start: float, end: float, marks: Sequence[float] = ()
                 ) -> tuple[float, float] | None:
    """The longest time without progress in a cumulative series within [start, end]:
    (when it began, how long), or None for an empty window.

    Progress is a sample above every earlier one, or one of `marks` (a transfer's data
    phase beginning: its QP setup completed). The gaps run from `start` to the first
    progress, between progress, and from the last to `end`. Progress is reported every
    ~0.1 s while data moves, so that is the floor.
    """
    if end < start:
        return None
    anchors, top = [start, end], None
    for t, v in series:
        if t <= start:
            top = v if top is None else max(top, v)
        elif t < end and (top is None or v > top):
            anchors.append(t)
            top = v
    anchors += [m for m in marks if start < m < end]
    anchors.sort()
    length, began = max((b - a, a) for a, b in zip(anchors, anchors[1:])) if len(anchors) > 1 \
        else (0.0, start)
    return began, length


def convergence_time(flow_series: dict[str, Sequence[tuple[float, float]]], start: float,
                     end: float, window: float, threshold: float = 0.9) -> float | None:
    """First time after `start` from which Jain over `window`-long windows stays >= threshold."""
    t, first_ok = start, None
    while t + window <= end:
        j = jain([mean_rate(s, t, t + window) for s in flow_series.values()])
        if j >= threshold:
            first_ok = t if first_ok is None else first_ok
        else:
            first_ok = None
        t += window / 2
    return None if first_ok is None else first_ok - start


def port_steady(port: PortSample, t0: float, t1: float, rate_bps: float) -> dict[str, float]:
    """Utilisation and queue depth of one sampled (port, TC) within [t0, t1].

    Utilisation counts every byte the port sent (headers too) against the
    shaped rate; queue percentiles are over the samples in the window.
    """
    series = port["series"]
    util = mean_rate(series["tx_bytes"], t0, t1) / rate_bps if rate_bps else 0.0
    q = [v for t, v in series["queued"] if t0 <= t <= t1]
    return {"utilisation": round(util, 4), "queue_p10": percentile(q, 10),
            "queue_p50": percentile(q, 50), "queue_p90": percentile(q, 90),
            "queue_max": max(q, default=0)}


def bottleneck(ports: Sequence[PortSample], t0: float, t1: float, rate_bps: float,
               tc: int) -> dict | None:
    """The busiest port of class `tc` over the steady window, with its queue."""
    best = None
    for p in ports:
        if p["tc"] != tc or t1 <= t0:
            continue
        s = port_steady(p, t0, t1, rate_bps)
        key = (s["utilisation"], s["queue_p90"])
        if best is None or key > best[0]:
            best = (key, {"node": p["node"], "port": p["port"], "tc": tc, **s})
    return best[1] if best else None
