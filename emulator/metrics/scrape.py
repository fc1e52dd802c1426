"""One scrape of a lab: every collector's fetch in parallel, then every parse.

Fetches run on worker threads (most of their time is waiting for the
kernel, a daemon or an engine), so a scrape costs about its slowest
collector. Each collector's success and duration are metrics too, as in
node_exporter. `build()` is pure: the golden test feeds it captured raws.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import outfile
from ..errors import RocelabError
from ..plan import Plan, compile_plan
from ..spec import parse as parse_spec
from .collectors import ALL
from .model import Families, Family, Kind


@dataclass
class Outcome:
    """What one collector's fetch gave: raw data or an error, and how long it took."""

    raw: Any = None
    error: str | None = None
    seconds: float = 0.0


@dataclass
class Scrape:
    families: list[Family]
    outcomes: dict[str, Outcome]
    at: float = field(default_factory=time.time)  # wall clock, for rates in `top`
    seconds: float = 0.0  # the whole scrape


class Scraper:
    def __init__(self, plan: Plan):
        self.plan = plan
        self.collectors = [c(plan) for c in ALL]
        self._lock = threading.Lock()  # concurrent HTTP scrapes take turns
        self._pool = ThreadPoolExecutor(len(self.collectors), thread_name_prefix="collector")

    def fetch(self) -> dict[str, Outcome]:
        futures = {c.name: self._pool.submit(_timed_fetch, c) for c in self.collectors
                   if c.applies()}
        return {name: f.result() for name, f in futures.items()}

    def scrape(self) -> Scrape:
        with self._lock:
            t0 = time.perf_counter()
            outcomes = self.fetch()
            scrape = build(self.plan, outcomes)
            scrape.seconds = time.perf_counter() - t0
            return scrape

    def capture(self, out: Path) -> list[Path]:
        """Write every collector's raw fetch output (the unit tests' fixtures) and the spec."""
        from .. import state

        outfile.make_dir(out)
        record = state.read(self.plan.lab) or {}
        paths = [out / "capture.json"]
        outfile.write_text(paths[0], json.dumps({"lab": self.plan.lab, "spec": record.get("spec")}, indent=1))
        for name, o in self.fetch().items():
            if o.error:
                raise RocelabError(f"capture: collector {name} failed: {o.error}")
            paths.append(out / f"{name}.json")
            outfile.write_text(paths[-1], json.dumps(encode_raw(o.raw), indent=1) + "\n")
        return paths

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for c in self.collectors:
            if hasattr(c, "close"):
                c.close()


def _timed_fetch(collector: Any) -> Outcome:
    t0 = time.perf_counter()
    try:
        raw = collector.fetch()
    except (OSError, RocelabError, ValueError, KeyError) as e:  # a source that is gone or broken
        return Outcome(error=f"{type(e).__name__}: {e}", seconds=time.perf_counter() - t0)
    return Outcome(raw=raw, seconds=time.perf_counter() - t0)


def build(plan: Plan, outcomes: dict[str, Outcome],
          clock: Callable[[], float] = time.perf_counter) -> Scrape:
    """Parse every raw (pure but for `clock`) and add each collector's success and duration."""
    families: list[Family] = []
    meta = Families(plan.lab)
    by_name = {c.name: c for c in ALL}
    for name, o in outcomes.items():
        t0 = clock()
        if o.error is None:
            try:
                families += by_name[name].parse(o.raw, plan)
            except (ValueError, KeyError, TypeError, AttributeError) as e:  # answered nonsense
                o.error = f"parse: {type(e).__name__}: {e}"
        o.seconds += clock() - t0
        labels = meta.labels(collector=name)
        meta.add(Kind.GAUGE, "rocelab_scrape_collector_success",
                 "1 if the collector fetched and parsed its source.", int(o.error is None), labels)
        meta.add(Kind.GAUGE, "rocelab_scrape_collector_duration_seconds",
                 "Time the collector took (fetch and parse).", round(o.seconds, 6), labels)
    return Scrape(families + meta.as_list(), outcomes)


# -- captured raws: bytes as base64 inside JSON ------------------------------------


def encode_raw(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray)):
        return {"base64": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, dict):
        return {k: encode_raw(x) for k, x in v.items()}
    if isinstance(v, list):
        return [encode_raw(x) for x in v]
    return v


def decode_raw(v: Any) -> Any:
    if isinstance(v, dict):
        if set(v) == {"base64"}:
            return base64.b64decode(v["base64"])
        return {k: decode_raw(x) for k, x in v.items()}
    if isinstance(v, list):
        return [decode_raw(x) for x in v]
    return v


def load_capture(path: Path, source: str = "<capture>") -> tuple[Plan, dict[str, Outcome]]:
    """The plan and the raw outcomes of a captured scrape (durations zero)."""
    meta = json.loads((path / "capture.json").read_text())
    plan = compile_plan(parse_spec(meta["spec"], source), source)
    outcomes = {}
    for c in ALL:
        f = path / f"{c.name}.json"
        if f.exists():
            outcomes[c.name] = Outcome(raw=decode_raw(json.loads(f.read_text())))
    return plan, outcomes
