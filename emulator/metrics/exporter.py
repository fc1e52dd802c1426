"""The Prometheus side: families -> exposition text, and an HTTP server for one lab.

The exporter is its own process (`rocelab metrics LAB`, or the one `rocelab up
--metrics ADDR:PORT` starts: `python -m emulator.metrics.exporter --lab LAB
--listen ADDR:PORT --ready FILE`), never the PFC controller: a scrape must not
steal the controller's reaction time.

Exposition is formatted here rather than by prometheus_client's
generate_latest, which needs ~48 ms of CPU for the ~2,500 samples of
clos-2x4 with the congestion plane (a quarter of the scrape budget); the
unit tests hold this formatter to byte-identical output with
generate_latest (`reference_exposition`) and to prometheus_client's parser.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

from ..errors import RocelabError
from ..histogram import Histogram
from .model import Family, Kind, Labels
from .scrape import Scraper

DEFAULT_LISTEN = "127.0.0.1:9464"
EXPOSE_FLAGS = {"metrics": "--expose", "up": "--expose-metrics"}  # the opt-in, per command


def _escape(v: str) -> str:
    if "\\" in v or "\n" in v or '"' in v:
        return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return v


def exposition(families: Iterable[Family]) -> str:
    """The text format Prometheus scrapes (version 0.0.4), as generate_latest writes it."""
    out = []
    label_text: dict[int, str] = {}  # id(label dict) -> "{...}": collectors share label sets
    for fam in families:
        help_ = fam.help.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {fam.name} {help_}\n# TYPE {fam.name} {fam.kind.value}\n")
        for labels, hist in fam.histograms:
            out += _histogram_lines(fam.name, labels, hist)
        for labels, value in fam.samples:
            text = label_text.get(id(labels))
            if text is None:
                inner = ",".join(f'{k}="{_escape(labels[k])}"' for k in sorted(labels))
                text = label_text[id(labels)] = f"{{{inner}}}" if inner else ""
            out.append(f"{fam.name}{text} {floatToGoString(value)}\n")
    return "".join(out)


def _histogram_lines(name: str, labels: Labels, hist: Histogram) -> list[str]:
    """One histogram as prometheus_client writes it: every `_bucket` (labels sorted, `le`
    among them), then `_count` and `_sum`."""
    items = sorted((k, _escape(v)) for k, v in labels.items())
    before = "".join(f'{k}="{v}",' for k, v in items if k < "le")
    after = "".join(f',{k}="{v}"' for k, v in items if k > "le")
    plain = ",".join(f'{k}="{v}"' for k, v in items)
    plain = f"{{{plain}}}" if plain else ""
    lines = [f'{name}_bucket{{{before}le="{floatToGoString(le)}"{after}}} {floatToGoString(n)}\n'
             for le, n in hist.cumulative()]
    lines.append(f"{name}_count{plain} {floatToGoString(hist.count)}\n")
    lines.append(f"{name}_sum{plain} {floatToGoString(hist.sum)}\n")
    return lines


def to_prometheus(families: Iterable[Family]) -> Iterator[Metric]:
    for fam in families:
        base = fam.name.removesuffix("_total") if fam.kind is Kind.COUNTER else fam.name
        metric = Metric(base, fam.help, fam.kind.value)
        for labels, hist in fam.histograms:
            for le, n in hist.cumulative():
                metric.add_sample(f"{fam.name}_bucket", labels | {"le": floatToGoString(le)}, n)
            metric.add_sample(f"{fam.name}_count", labels, hist.count)
            metric.add_sample(f"{fam.name}_sum", labels, hist.sum)
        for labels, value in fam.samples:
            metric.add_sample(fam.name, labels, value)
        yield metric


def reference_exposition(families: list[Family]) -> str:
    """The same text through prometheus_client (slow; the tests' reference)."""
    class Static:
        def collect(self) -> Iterator[Metric]:
            return to_prometheus(families)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Static())
    return generate_latest(registry).decode()


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    def url(self, port: int | None = None) -> str:
        """The /metrics URL (with `port`: the one actually bound, for port 0)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port if port is None else port}/metrics"

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def exposed(self) -> bool:
        """Reachable from other machines: any address but loopback (0.0.0.0 and :: are all)."""
        return not ipaddress.ip_address(self.host).is_loopback

    def check_exposure(self, expose: bool, flag: str = EXPOSE_FLAGS["metrics"]) -> None:
        """Refuse a non-loopback address unless the user opted in with `flag`."""
        if self.exposed and not expose:
            raise RocelabError(f"{self} is not a loopback address: /metrics would be reachable "
                               f"from other machines; add {flag} to serve there, or use "
                               f"{DEFAULT_LISTEN}")

    def warning(self) -> str:
        """The one line printed when serving on an exposed address."""
        return (f"warning: serving /metrics on {self}, reachable from other machines "
                "(no authentication)")

    @classmethod
    def parse(cls, text: str) -> Listen:
        host, sep, port = text.rpartition(":")
        try:
            if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
                raise ValueError
            ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            raise RocelabError(f"--listen {text!r}: expected ADDRESS:PORT, "
                               f"e.g. {DEFAULT_LISTEN} or [::1]:9464") from None
        return cls(host.strip("[]"), int(port))


def _handler(scraper: Scraper) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.split("?")[0] != "/metrics":
                body, status, ctype = b"rocelab exporter: see /metrics\n", 404, "text/plain"
            else:
                body, status, ctype = exposition(scraper.scrape().families).encode(), 200, \
                    CONTENT_TYPE_LATEST
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args) -> None:  # one line per scrape is noise
            pass

    return Handler


class _Server6(ThreadingHTTPServer):
    address_family = socket.AF_INET6


def serve(scraper: Scraper, listen: Listen,
          expose: bool = False) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Start serving /metrics on a background thread (an IPv6 address: an IPv6 socket).
    A non-loopback address only with `expose` (the user's --expose)."""
    listen.check_exposure(expose)
    cls = _Server6 if ":" in listen.host else ThreadingHTTPServer
    try:
        server = cls((listen.host, listen.port), _handler(scraper))
    except OSError as e:
        raise RocelabError(f"cannot listen on {listen}: {e.strerror or e}") from None
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return server, thread


def run(scraper: Scraper, listen: Listen, ready: Callable[[int], None],
        expose: bool = False) -> None:
    """Serve until SIGINT or SIGTERM; `ready(port)` once listening (port 0: the one bound)."""
    # Block the stop signals before the server thread exists, so it inherits the
    # mask and only sigwait() below ever receives them.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    server, thread = serve(scraper, listen, expose)
    ready(server.server_port)
    signal.sigwait({signal.SIGINT, signal.SIGTERM})
    server.shutdown()
    thread.join(5)


def main() -> None:
    """The exporter `up --metrics` starts (in the root namespace, tagged with the lab).

    Writes --ready FILE ({"pid", "url", "listen"}, atomically) once it listens; a
    failure to listen is one line on stderr and exit 1, which `up` reports."""
    from .. import state

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--lab", required=True)
    ap.add_argument("--listen", required=True, help="ADDRESS:PORT (port 0: a free one)")
    ap.add_argument("--ready", type=Path, help="write the URL here once listening")
    ap.add_argument("--expose", action="store_true", help="allow a non-loopback address")
    args = ap.parse_args()
    scraper = Scraper(state.lab_plan(args.lab))

    def ready(port: int) -> None:
        if args.ready:
            tmp = args.ready.with_suffix(".tmp")
            tmp.write_text(json.dumps({"pid": os.getpid(), "url": where.url(port),
                                       "listen": str(Listen(where.host, port))}) + "\n")
            tmp.replace(args.ready)

    try:
        where = Listen.parse(args.listen)
        if where.exposed and args.expose:
            print(f"rocelab metrics: {where.warning()}", file=sys.stderr)
        run(scraper, where, ready, args.expose)
    except RocelabError as e:
        print(f"rocelab metrics: error: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        scraper.close()


if __name__ == "__main__":
    main()
