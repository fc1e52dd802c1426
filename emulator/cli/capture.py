from __future__ import annotations

import contextlib
import os
import sys
from typing import BinaryIO

import click

from .. import lab, outfile, state
from ..errors import RocelabError
from ..tools import capture
from ..units import parse_duration
from .names import LAB, NODE
from .options import DURATION
from .progress import err_console


@click.command("capture")
@click.argument("name", type=LAB)
@click.argument("node", type=NODE)
@click.argument("port")
@click.option("-w", "--write", "out", metavar="FILE|-",
              help="Where the pcap goes; '-' is stdout (pipe it to `wireshark -k -i -`). "
                   "Default: LAB-NODE-PORT.pcap in the current directory.")
@click.option("--count", default=capture.DEFAULT_COUNT, show_default=True,
              type=click.IntRange(min=0), help="Stop after N packets (0: no limit).")
@click.option("--duration", default=f"{capture.DEFAULT_DURATION_S:g}s", show_default=True, type=DURATION,
              help="Stop after this long: 500ms, 10s, 2m (0: no limit).")
@click.option("--filter", "bpf", metavar="EXPR", help="A tcpdump (BPF) filter, e.g. 'udp port 4791'.")
def command(name: str, node: str, port: str, out: str | None, count: int, duration: str,
            bpf: str | None) -> None:
    """A full-snaplen pcap of one port of one node, taken inside its namespace.

    Stops after --count packets or --duration, whichever comes first (or Ctrl-C).
    Router ports are named after their peer (leaf1's spine1); a host's is eth0.
    Progress and the summary go to stderr, so `-w -` keeps stdout pure pcap.

    Example: rocelab capture clos-2x4 leaf1 spine1 -w - | wireshark -k -i -
    """
    lab.require_root()
    duration_s = parse_duration(duration, "--duration")
    plan = state.lab_plan(name)
    capture.target(plan, node, port)  # an unknown node or port fails before any file exists
    path = out or capture.default_path(plan.lab, node, port)
    to_stdout = path == "-"
    if to_stdout and sys.stdout.isatty():
        raise RocelabError("-w -: stdout is a terminal; pipe it (| wireshark -k -i -) or give a file")
    dest = "stdout" if to_stdout else path
    limits = " or ".join(x for x in (f"{count} packets" if count else "",
                                     f"{duration_s:g} s" if duration_s else "") if x) or "Ctrl-C"
    opened: list[BinaryIO] = []

    def open_sink() -> BinaryIO:  # called once tcpdump listens: a failed start touches no file
        opened.append(sys.stdout.buffer if to_stdout else outfile.open_fresh(path))
        err_console.print(f"capturing {plan.lab} {node}:{port}" + (f" ({bpf})" if bpf else "")
                          + f" until {limits} -> {dest}", soft_wrap=True, markup=False)
        return opened[0]

    spinner = err_console.status("") if err_console.is_terminal else contextlib.nullcontext()
    try:
        with spinner as status:
            def tick(packets: int, nbytes: int) -> None:
                if status is not None:
                    status.update(f"{packets} packets, {nbytes} bytes of pcap")

            res = capture.capture(plan, node, port, open_sink, count, duration_s, bpf, tick=tick)
    finally:
        if opened and not to_stdout:
            opened[0].close()
    if to_stdout and res.stopped == "reader closed":  # what stdout still buffers can go nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    drops = f", {res.dropped_by_kernel} dropped by the kernel" if res.dropped_by_kernel else ""
    packets = f"{res.packets} packet{'' if res.packets == 1 else 's'}"
    err_console.print(f"{packets} ({res.bytes} bytes of pcap) in {res.seconds:.2f} s -> {dest} "
                      f"(stopped: {res.stopped}{drops})", soft_wrap=True, markup=False)
