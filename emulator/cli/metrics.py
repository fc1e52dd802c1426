from __future__ import annotations

import signal
from pathlib import Path

import click

from .. import lab, state
from ..errors import RocelabError
from ..metrics.exporter import DEFAULT_LISTEN, Listen, exposition, serve
from ..metrics.scrape import Scraper


def _listen(ctx: click.Context, param: click.Parameter, value: str) -> Listen:
    try:
        return Listen.parse(value)
    except RocelabError:  # a bad command line (exit 64), found before anything is touched
        raise click.BadParameter(f"{value!r} is not ADDRESS:PORT (e.g. {DEFAULT_LISTEN} or "
                                 "0.0.0.0:9464; port 0 picks a free one)") from None


@click.command("metrics")
@click.argument("name")
@click.option("--listen", "where", default=DEFAULT_LISTEN, show_default=True, callback=_listen,
              metavar="ADDRESS:PORT", help="Where to serve /metrics (port 0: a free one).")
@click.option("--once", is_flag=True, help="Print one scrape's exposition text and exit.")
@click.option("--capture", type=click.Path(file_okay=False),
              help="Write every collector's raw input to DIR (unit-test fixtures) and exit.")
def command(name: str, where: Listen, once: bool, capture: str | None) -> None:
    """Serve the lab's counters to Prometheus at http://ADDRESS:PORT/metrics.

    Example: rocelab metrics clos-2x4 --listen 127.0.0.1:9464
    """
    lab.require_root()
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
