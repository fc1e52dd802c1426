from __future__ import annotations

import signal
from pathlib import Path

import click

from .. import lab, state
from ..metrics.exporter import DEFAULT_LISTEN, Listen, exposition, serve
from ..metrics.scrape import Scraper


@click.command("metrics")
@click.argument("name")
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True,
              help="ADDRESS:PORT to serve /metrics on.")
@click.option("--once", is_flag=True, help="Print one scrape's exposition text and exit.")
@click.option("--capture", type=click.Path(file_okay=False),
              help="Write every collector's raw input to DIR (unit-test fixtures) and exit.")
def command(name: str, listen: str, once: bool, capture: str | None) -> None:
    """Serve the lab's counters to Prometheus at http://ADDRESS:PORT/metrics.

    Example: rocelab metrics clos-2x4 --listen 127.0.0.1:9464
    """
    lab.require_root()
    where = Listen.parse(listen)
    scraper = Scraper(state.lab_plan(name))
    try:
        if capture:
            paths = scraper.capture(Path(capture))
            click.echo(f"lab {name}: wrote {len(paths)} files to {capture}")
        elif once:
            click.echo(exposition(scraper.scrape().families), nl=False)
        else:
            _serve(scraper, name, where)
    finally:
        scraper.close()


def _serve(scraper: Scraper, name: str, where: Listen) -> None:
    # Block the stop signals before the server thread exists, so it inherits the
    # mask and only sigwait() below ever receives them.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    server, thread = serve(scraper, where)
    click.echo(f"lab {name}: serving http://{where.host}:{server.server_port}/metrics "
               "(Ctrl-C stops)")
    signal.sigwait({signal.SIGINT, signal.SIGTERM})
    server.shutdown()
    thread.join(5)
