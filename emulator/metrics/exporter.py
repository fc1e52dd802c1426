"""The Prometheus side: families -> exposition text, and an HTTP server for one lab.

The exporter is its own process (`rocelab metrics LAB`), never the PFC
controller: a scrape must not steal the controller's reaction time.

Exposition is formatted here rather than by prometheus_client's
generate_latest, which needs ~48 ms of CPU for the ~2,500 samples of
clos-2x4 with the congestion plane (a quarter of the scrape budget); the
unit tests hold this formatter to byte-identical output with
generate_latest (`reference_exposition`) and to prometheus_client's parser.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

from ..errors import RocelabError
from .model import Family, Kind
from .scrape import Scraper

DEFAULT_LISTEN = "127.0.0.1:9464"


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
        for labels, value in fam.samples:
            text = label_text.get(id(labels))
            if text is None:
                inner = ",".join(f'{k}="{_escape(labels[k])}"' for k in sorted(labels))
                text = label_text[id(labels)] = f"{{{inner}}}" if inner else ""
            out.append(f"{fam.name}{text} {floatToGoString(value)}\n")
    return "".join(out)


def to_prometheus(families: Iterable[Family]) -> Iterator[Metric]:
    for fam in families:
        base = fam.name.removesuffix("_total") if fam.kind is Kind.COUNTER else fam.name
        metric = Metric(base, fam.help, fam.kind.value)
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

    @classmethod
    def parse(cls, text: str) -> Listen:
        host, sep, port = text.rpartition(":")
        try:
            if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
                raise ValueError
            ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            raise RocelabError(f"--listen {text!r}: expected ADDRESS:PORT, "
                               f"e.g. {DEFAULT_LISTEN} or 0.0.0.0:9464") from None
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


def serve(scraper: Scraper, listen: Listen) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Start serving /metrics on a background thread."""
    try:
        server = ThreadingHTTPServer((listen.host, listen.port), _handler(scraper))
    except OSError as e:
        raise RocelabError(f"cannot listen on {listen.host}:{listen.port}: "
                           f"{e.strerror or e}") from None
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return server, thread
