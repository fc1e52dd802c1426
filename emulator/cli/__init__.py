"""`rocelab`: a thin command line over the library (one module per command).

Library code raises RocelabError subclasses; this layer turns them into one
line on stderr and the error's exit code (errors.ExitCode), never a
traceback. With `--json` the error is also printed on stdout as
{"error": {"code": N, "type": "...", "message": "..."}}. A bad command line
(unknown option, missing argument) exits 64, apart from the codes of bad
files (2) and failed checks.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

import click

from ..errors import ExitCode, RocelabError


def _fail(code: int, kind: str, message: str) -> None:
    """Report an error the way every command does, then exit with `code`."""
    message = _one_line(message)
    click.echo(f"rocelab: error: {message}", err=True)
    if "--json" in _own_args():
        click.echo(json.dumps({"error": {"code": int(code), "type": kind, "message": message}}))
    sys.exit(code)


def _one_line(message: str) -> str:
    """The message on one line whatever it quotes: a newline, a form feed, U+2028 or a
    terminal control character in a user's value shows escaped (\\n, \\x0c, ...)."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode()
                   for c in message.strip())


def _own_args() -> list[str]:
    """rocelab's own arguments: not those after `--` (exec passes them to its command)."""
    args = sys.argv[1:]
    return args[:args.index("--")] if "--" in args else args


class RocelabGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RocelabError as e:
            _fail(e.exit_code, type(e).__name__, str(e))
        except KeyboardInterrupt:
            _fail(ExitCode.INTERRUPTED, "Interrupted", "interrupted")
        except BrokenPipeError:  # `rocelab ... | head`: main() exits quietly
            raise
        except OSError as e:  # a path the user gave that cannot be read or written
            where = f"{e.filename}: " if e.filename else ""
            _fail(ExitCode.ERROR, type(e).__name__, f"{where}{e.strerror or e}")

    def main(self, *args: Any, **kwargs: Any) -> Any:
        argv = kwargs.get("args", args[0] if args else None)
        if argv is not None and any("\0" in a for a in argv):  # no real argv has one (execve)
            _fail(ExitCode.USAGE, "UsageError", "an argument contains a NUL byte")
        try:
            # click's main() is overloaded on a literal standalone_mode; *args hides which
            return super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[call-overload]
        except click.UsageError as e:  # click's own code for these is 2, the same as a bad file
            hint = f" (see `{e.ctx.command_path} --help`)" if e.ctx else ""
            _fail(ExitCode.USAGE, "UsageError", e.format_message() + hint)
        except click.ClickException as e:  # a file click could not open, ...
            _fail(ExitCode.ERROR, type(e).__name__, e.format_message())
        except click.exceptions.Abort:
            _fail(ExitCode.INTERRUPTED, "Interrupted", "interrupted")
        except BrokenPipeError:  # `rocelab ... | head`
            sys.stderr.close()
            sys.exit(ExitCode.OK)


@click.group(cls=RocelabGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rocelab")
def main() -> None:
    """rocelab: a packet-level RoCEv2 fabric emulator on Linux network namespaces."""


# One module per command, in the order `rocelab --help` lists them.
COMMANDS = ("up", "down", "status", "wait", "validate", "exec_", "render", "export", "save", "schema",
            "transfer", "kv", "replay",
            "perftest", "run", "check", "fail", "heal", "diagnose", "metrics", "top",
            "graph", "calibrate")


def _register() -> None:
    # then the testers' tools: list the labs, a router's vtysh, a port's pcap
    for name in (*COMMANDS, "list_", "vtysh", "capture"):
        main.add_command(importlib.import_module(f"{__name__}.{name}").command)


_register()
