"""Dilation headroom, purely: the incast's fidelity figures at one `max_link_rate`, the one
definition of "holds" (`problems`), and the ladder search that `rocelab calibrate` and the
bench's dilation section share (`search`, with the run of each rate injected).

A dilated lab emulates 1/D seconds of real time per wall second (D = declared speed /
max_link_rate), so a higher rate is more real time per wall second, until the engines and
the controller cannot keep up: the bottleneck goes idle between bursts, the queue swings,
pauses appear. `ladder.py` runs the incast (experiments/incast.yaml, its flows scaled with
the rate so each run lasts as long in wall time) at each rate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import RocelabError
from ..units import parse_size, parse_speed
from .spec import Experiment

BASE_RATE = "100M"  # the rate experiments/incast.yaml's flow sizes are written for
LADDER = ("100M", "200M", "400M", "1G")  # what calibrate and the bench try by default


@dataclass(frozen=True)
class Figures:
    """What one incast run at one rate kept of its fidelity (bytes, fractions, counts)."""

    rate: str  # the max_link_rate as given (400M)
    rate_bps: int
    dilation: float
    jain: float | None
    utilisation: float | None  # the bottleneck's, steady state
    queue_p50: float | None
    queue_p90: float | None
    queue_max: float | None
    pauses: int
    drops: int | None  # lossless drops
    expectations: dict[str, bool] = field(default_factory=dict)  # each expect: line -> ok
    wall_s: float = 0.0  # how long the flows ran, wall

    @property
    def real_per_wall(self) -> float:
        """Seconds of real time emulated per wall second: 1/D."""
        return 1.0 / self.dilation if self.dilation else 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"real_per_wall": round(self.real_per_wall, 6)}


def not_run(rate: str) -> Figures:
    """A rate whose run failed (its lab could not come up, ...): no figures."""
    return Figures(rate, parse_speed(rate, "rate"), 0.0, None, None, None, None, None, 0, None)


def figures(rate: str, results: Mapping[str, Any]) -> Figures:
    """The figures of one run's results.json (analysis.summarize's output)."""
    steady = results.get("steady") or {}
    neck = steady.get("bottleneck") or {}
    flows = results.get("flows") or []
    ends = [f["end_s"] for f in flows if f.get("end_s") is not None]
    starts = [f["start_s"] for f in flows if f.get("start_s") is not None]
    return Figures(
        rate=rate, rate_bps=parse_speed(rate, "rate"), dilation=float(results["dilation"]),
        jain=steady.get("jain"), utilisation=neck.get("utilisation"),
        queue_p50=neck.get("queue_p50"), queue_p90=neck.get("queue_p90"),
        queue_max=neck.get("queue_max"), pauses=int((results.get("pfc") or {}).get("pauses", 0)),
        drops=results.get("lossless_drops"),
        expectations={e["expect"]: bool(e["ok"]) for e in results.get("expectations", [])},
        wall_s=round(max(ends) - min(starts), 3) if ends and starts else 0.0)


@dataclass(frozen=True)
class Criteria:
    """What "holds" means: the absolute floors, and how far the queue and pauses may
    move from the baseline (the lowest rate, measured in the same run)."""

    min_utilisation: float = 0.93  # the incast's own expect line says 0.9; 100M measured 92-98 %
    min_jain: float = 0.95
    queue_factor: float = 2.0  # p90 and max at most this times the baseline's ...
    queue_slack: float = 150_000  # ... plus this (bytes: Kmin), so a near-empty baseline is no trap
    extra_pauses: int = 2  # pauses beyond the baseline's


HOLDS = Criteria()


def problems(fig: Figures, baseline: Figures | None = None, c: Criteria = HOLDS) -> list[str]:
    """Why `fig` does not keep the incast's fidelity (empty: it holds)."""
    out = [f"expect failed: {text}" for text, ok in fig.expectations.items() if not ok]
    if fig.utilisation is None or fig.utilisation < c.min_utilisation:
        out.append(f"bottleneck {_pct(fig.utilisation)} busy (< {c.min_utilisation:.0%})")
    if fig.jain is None or fig.jain < c.min_jain:
        out.append(f"Jain {'none' if fig.jain is None else f'{fig.jain:.3f}'} (< {c.min_jain})")
    if fig.drops is None or fig.drops > 0:
        out.append(f"{fig.drops} lossless drops")
    if baseline is None or baseline is fig:
        return out
    for name in ("queue_p90", "queue_max"):
        value, base = getattr(fig, name), getattr(baseline, name)
        if value is not None and base is not None and value > base * c.queue_factor + c.queue_slack:
            out.append(f"{name} {value / 1e3:.0f} KB (baseline {base / 1e3:.0f} KB)")
    if fig.pauses > baseline.pauses + c.extra_pauses:
        out.append(f"{fig.pauses} pauses (baseline {baseline.pauses})")
    return out


def _pct(v: float | None) -> str:
    return "no" if v is None else f"{v:.1%}"


@dataclass(frozen=True)
class Rung:
    figures: Figures
    problems: list[str]

    @property
    def holds(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return self.figures.to_json() | {"holds": self.holds, "problems": self.problems}


@dataclass(frozen=True)
class Ladder:
    rungs: list[Rung]

    @property
    def holds(self) -> Rung | None:
        """The highest rate below the first that broke (None: the lowest broke)."""
        best = None
        for r in self.rungs:
            if not r.holds:
                break
            best = r
        return best

    def to_json(self) -> dict[str, Any]:
        best = self.holds
        return {"holds_rate": best.figures.rate if best else None,
                "holds_bps": best.figures.rate_bps if best else None,
                "dilation": best.figures.dilation if best else None,
                "rates": [r.to_json() for r in self.rungs], "criteria": asdict(HOLDS)}


Measure = Callable[[str], Figures]


def search(rates: Sequence[str], measure: Measure, progress: Callable[[str], None] = lambda m: None,
           stop_at_break: bool = True) -> Ladder:
    """Run `measure` at each rate, lowest first; the lowest is the baseline of the rest.
    `stop_at_break`: stop after the first rate that does not hold, and let a rate that
    cannot run raise (calibrate); else run them all, a rate that cannot run recorded as
    not holding (the bench: where and how fidelity goes)."""
    rungs: list[Rung] = []
    ordered = sorted(rates, key=lambda r: parse_speed(r, "rate"))
    for i, rate in enumerate(ordered):
        progress(f"rate {rate} ({i + 1}/{len(ordered)}): running the incast")
        try:
            fig = measure(rate)
        except RocelabError as e:  # the bench records it and goes on; calibrate fails with it
            if stop_at_break:
                raise
            rungs.append(Rung(not_run(rate), [f"not run: {e}"]))
            progress(f"rate {rate}: not run: {e}")
            continue
        rung = Rung(fig, problems(fig, rungs[0].figures if rungs else None))
        rungs.append(rung)
        progress(f"rate {rate}: D = {fig.dilation:g}, " + (
            "holds" if rung.holds else "breaks: " + "; ".join(rung.problems)))
        if stop_at_break and not rung.holds:
            break
    return Ladder(rungs)


def check_rates(rates: Sequence[str], option: str = "--rates") -> list[str]:
    """Each rate parses (a SpeedError naming `option` if not); at least one; no repeats."""
    cleaned = [r.strip() for r in rates if r.strip()]
    if not cleaned:
        raise RocelabError(f"{option}: give at least one rate, e.g. 100M,200M,400M")
    bps = [parse_speed(r, option) for r in cleaned]
    low = [r for r, b in zip(cleaned, bps) if b < parse_speed(BASE_RATE, "rate")]
    if low:  # DCQCN's timers dilate with D: below it the onset outlasts steady_after
        raise RocelabError(f"{option}: {low[0]} is below {BASE_RATE}, the rate the incast's "
                           f"flows and steady state are written for: give rates of {BASE_RATE} "
                           "or more")
    if len(set(bps)) != len(bps):
        raise RocelabError(f"{option}: a rate is given twice ({', '.join(cleaned)})")
    return cleaned


def scaled(exp: Experiment, rate: str) -> Experiment:
    """The experiment with every flow's size scaled by rate / BASE_RATE, so it runs as long
    in wall time at that rate as it does at BASE_RATE (and moves that many times the bytes)."""
    factor = parse_speed(rate, "rate") / parse_speed(BASE_RATE, "rate")
    flows = [f.model_copy(update={"size": f"{round(parse_size(f.size) * factor)}B"})
             if f.size else f for f in exp.flows]
    return exp.model_copy(update={"flows": flows})
