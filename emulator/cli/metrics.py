from __future__ import annotations

from pathlib import Path

import click

from .. import lab, state
from ..errors import RocelabError
from ..metrics.exporter import DEFAULT_LISTEN, EXPOSE_FLAGS, Listen, exposition, run
from ..metrics.scrape import Scraper
from .names import LAB


def parse_listen(ctx: click.Context, param: click.Parameter, value: str) -> Listen:
    try:
        return Listen.parse(value)
    except RocelabError:  # a bad command line (exit 64), found before anything is touched
        raise click.BadParameter(f"{value!r} is not ADDRESS:PORT (e.g. {DEFAULT_LISTEN} or "
                                 "[::1]:9464; port 0 picks a free one)") from None


def check_exposure(where: Listen, expose: bool, command: str) -> None:
    """A non-loopback address only with the command's opt-in flag (else exit 64, before
    anything is touched); with it, one warning line on stderr."""
    try:
        where.check_exposure(expose, EXPOSE_FLAGS[command])
    except RocelabError as e:
        raise click.UsageError(str(e)) from None
    if where.exposed:
        click.echo(f"rocelab: {where.warning()}", err=True)


@click.command("metrics")
@click.argument("name", type=LAB)
@click.option("--listen", "where", default=DEFAULT_LISTEN, show_default=True, callback=parse_listen,
              metavar="ADDRESS:PORT", help="Where to serve /metrics (port 0: a free one).")
@click.option("--expose", is_flag=True,
              help="Allow a non-loopback ADDRESS (0.0.0.0, ::, a LAN address): /metrics is then "
                   "reachable from other machines, without authentication.")
@click.option("--once", is_flag=True, help="Print one scrape's exposition text and exit.")
@click.option("--capture", type=click.Path(file_okay=False),
              help="Write every collector's raw input to DIR (unit-test fixtures) and exit.")
def command(name: str, where: Listen, expose: bool, once: bool, capture: str | None) -> None:
    """Serve the lab's counters to Prometheus at http://ADDRESS:PORT/metrics.

    Example: rocelab metrics clos-2x4 --listen 127.0.0.1:9464
    """
    if not (once or capture):
        check_exposure(where, expose, "metrics")
    lab.require_root()
    scraper = Scraper(state.lab_plan(name))
    try:
        if capture:
            paths = scraper.capture(Path(capture))
            click.echo(f"lab {name}: wrote {len(paths)} files to {capture}")
        elif once:
            click.echo(exposition(scraper.scrape().families), nl=False)
        else:
            run(scraper, where, lambda port: click.echo(
                f"lab {name}: serving {where.url(port)} (Ctrl-C stops)"), expose)
    finally:
        scraper.close()
