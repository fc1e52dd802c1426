from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import click

from .. import faults, lab, state
from ..plan import Plan
from ..units import UnitError, parse_duration
from .names import LAB
from .progress import progress

USAGE = "link A B | node N | plane K | flap A B"


def target(plan: Plan, words: tuple[str, ...], silent: bool = False,
           gray: dict[str, Any] | None = None) -> faults.Fault:
    """`link A B`, `node N` or `plane K` (also `flap A B`) -> the fault it names; `gray`: link_fault's
    loss/corrupt/rate arguments (a link only).

    A node or link the lab does not have is faults.FaultTargetError (exit 4), naming what it has."""
    kind, *rest = words or ("",)
    gray = {k: v for k, v in (gray or {}).items() if v is not None}
    if gray and kind != "link":
        raise click.UsageError("--loss, --corrupt and --rate degrade one link: fail link A B --loss 1%")
    if kind in ("link", "flap") and len(rest) == 2:
        return faults.link_fault(plan, rest[0], rest[1], silent, **gray)
    if kind == "node" and len(rest) == 1:
        return faults.node_fault(plan, rest[0], silent)
    if kind == "plane" and len(rest) == 1:
        return faults.plane_fault(plan, rest[0], silent)
    raise click.UsageError(f"expected {USAGE}, got {' '.join(words) or 'nothing'}")


def settle(plan: Plan, watch: faults.FibWatcher, event: Mapping[str, Any], timeout_s: float,
           until: float | None = None) -> faults.Convergence:
    """Wait until routing reflects the event (ConvergeTimeout after timeout_s); say when it did."""
    with progress("waiting for routing to converge") as update:
        faults.settle(plan, watch, event, timeout_s, progress=update)
    return faults.convergence(watch.samples, event, plan, until)


def describe(conv: Mapping[str, Any]) -> str:
    ecmp = ", ".join(f"{leaf} {lo}" + (f"-{hi}" if hi != lo else "")
                     for leaf, (lo, hi) in conv["leaf_ecmp"].items())
    first = "" if conv["detect_s"] is None else f" (first FIB change after {conv['detect_s']:.3f} s)"
    return f"routing converged in {conv['converge_s']:.3f} s{first}; leaf ECMP now: {ecmp}"


def _fail_once(plan: Plan, fault: faults.Fault, wait: bool, timeout_s: float) -> faults.FaultEvent:
    if not wait:
        return faults.fail(plan, fault)
    with progress("waiting for routing to converge") as update:
        return faults.fail_settled(plan, fault, timeout_s, update)


def _flap(plan: Plan, fault: faults.Fault, period_s: float, count: int,
          timeout_s: float) -> faults.FlapEvent:
    with faults.FibWatcher(plan) as watch:
        event = faults.flap(plan, fault, period_s, count)
        last = event["transitions"][-1]
        settle(plan, watch, last, timeout_s)
    steps = event["transitions"]
    ends = [t["monotonic"] for t in steps[1:]] + [None]
    event["convergence"] = [faults.convergence(watch.samples, t, plan, end)
                            for t, end in zip(steps, ends)]
    return event


def _print(event: Mapping[str, Any]) -> None:
    fault = faults.Fault.from_json(dict(event))
    how = (f"gray: {fault.how()}, link up" if fault.gray
           else "silent: every frame dropped, carrier up" if event["silent"] else "carrier loss")
    if event["action"] == "flap":
        click.echo(f"flapped link {event['a']}-{event['b']} ({how}) {event['cycles']} times, "
                   f"period {event['period_s']:g} s, from {event['iso']}")
        for t, conv in zip(event["transitions"], event["convergence"]):
            state = "converged in " + (f"{conv['converge_s']:.3f} s" if conv["settled"]
                                       else "- (not before the next transition)")
            click.echo(f"  {t['iso']}  {t['action']:<4}  {state}")
        return
    ports = event["effects"]
    where = ", ".join(ports) if len(ports) <= 4 else f"{len(ports)} port ends"
    click.echo(f"failed {event['name']} ({how}: {where}) at {event['iso']}")
    if "convergence" in event and fault.gray:
        click.echo("routing unchanged: a gray link stays up and keeps its routes "
                   "(`rocelab heal` lifts it)")
    elif "convergence" in event:
        click.echo(describe(event["convergence"]))


def duration_option(ctx: click.Context, param: click.Parameter, value: str) -> float:
    """A duration option (2s, 500ms) as seconds > 0; a bad one is a usage error (exit 64)."""
    try:
        return parse_duration(value, None, positive=True)
    except UnitError as e:
        raise click.BadParameter(str(e)) from None


# What --timeout accepts (seconds, not negative), shared with heal.
TIMEOUT = click.FloatRange(min=0)


@click.command("fail")
@click.argument("name", type=LAB)
@click.argument("what", nargs=-1, required=True)
@click.option("--silent", is_flag=True,
              help="Drop every frame on both ends but keep carrier (nftables): only BFD or the "
                   "BGP hold timer notice.")
@click.option("--loss", metavar="PCT", help="Gray: drop this share of the frames, at random, in "
              "each direction (1%, 0.1%); the link stays up.")
@click.option("--corrupt", metavar="PCT", help="Gray: alter this share of the RoCE frames in "
              "each direction, so the receiver's ICRC check fails and it drops them.")
@click.option("--rate", metavar="SPEED", help="Gray: each end sends at most this (10G, 500M): a "
              "degraded optic (HTB; on a shaped lab real-equivalent, shaped at SPEED / D).")
@click.option("--period", default="2s", show_default=True, metavar="DURATION", callback=duration_option,
              help="flap: one down+up cycle (down for its first half).")
@click.option("--count", default=5, show_default=True, type=click.IntRange(min=1), help="flap: cycles.")
@click.option("--no-wait", is_flag=True, help="Return at once instead of waiting for routing to converge.")
@click.option("--timeout", default=30.0, show_default=True, type=TIMEOUT,
              help="Seconds to wait for convergence (exit 6 if it does not; the fault stays).")
@click.option("--json", "as_json", is_flag=True, help="Print the recorded event as JSON.")
def command(name: str, what: tuple[str, ...], silent: bool, loss: str | None, corrupt: str | None,
            rate: str | None, period: float, count: int, no_wait: bool, timeout: float,
            as_json: bool) -> None:
    """Inject a fault: WHAT is `link A B`, `node N`, `plane K` or `flap A B`.

    \b
    link A B           carrier loss: both router ends of the link go down at once,
                       as both optics report loss of light (a host's own end stays
                       up; its leaf's end goes down)
    link A B --silent  every frame dropped on both ends, carrier stays up: only BFD
                       or the BGP hold timer notice
    link A B --loss 1% --corrupt 0.5% --rate 10G
                       gray: the link stays up and routed, but loses, corrupts or
                       slows what crosses it (any of the three, both directions)
    node N             every link of router N fails that way (its FRR keeps running)
    plane K            every spine of plane K (0-based; a topology with planes: N)
                       fails as a node does, carrier loss or --silent
    flap A B           the link fails and heals --count times, --period per cycle

    Waits until routing has converged around the fault and says how long it
    took (docs/faults.md: how it is measured). The fault stays until
    `rocelab heal`.

    Example: rocelab fail clos-2x4 link leaf1 spine2 --silent
    """
    lab.require_root()
    plan = state.lab_plan(name)
    gray = faults.gray_args(loss, corrupt, rate) if (loss or corrupt or rate) else None
    fault = target(plan, what, silent, gray)
    event: Mapping[str, Any]
    if what[0] == "flap":
        event = _flap(plan, fault, period, count, timeout)
    else:
        event = _fail_once(plan, fault, not no_wait, timeout)
    if as_json:
        click.echo(json.dumps(event, indent=2))
    else:
        _print(event)
