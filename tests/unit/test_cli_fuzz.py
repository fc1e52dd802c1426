"""Property-based fuzz of the command line (issue 24, item 6), beside the file fuzz.

Every command of the click tree (introspected: a new command or option is fuzzed without
an edit here) gets hostile values for its arguments and options: `..`, `/`, absolute
paths, newlines, NUL, very long, negative, huge, unicode, option-like strings. Every
invocation ends in exit 0 or one `rocelab: error:` line with an exit code of the table in
docs/cli.md, no traceback, within a time bound; and nothing outside the private run root
changes (a sandbox beside it, the host's /etc/frr and /run/frr, its root-namespace links).

No lab runs under the private run root and no value is a valid topology or experiment
file, so no command gets as far as building one: they fail fast ("no lab named ...").
`down --all` is left out: it acts on every lab of the machine, not the run root's; so is
`calibrate`, which builds its own labs from a built-in incast when given nothing.
Most examples run in-process (CliRunner: fast); a few through the installed `rocelab`
under a memory limit. CI runs a fixed, derandomized sample; `make fuzz` runs 3000 fresh
examples (ROCELAB_FUZZ_EXAMPLES, ROCELAB_FUZZ_RANDOM=1).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from emulator import paths, state
from emulator.cli import main
from emulator.cli.exitcodes import CODES
from emulator.errors import ExitCode

EXAMPLES = int(os.environ.get("ROCELAB_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                derandomize=os.environ.get("ROCELAB_FUZZ_RANDOM") != "1",
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
SUBPROCESS_EXAMPLES = max(3, EXAMPLES // 30)  # ~3 s each: Python starting on a loaded machine
BOUND_S = 30.0  # a hang detector, not a speed claim: each fails fast, in well under a second
MEMORY_BYTES = 2 << 30  # address space of one real `rocelab` process
ROCELAB = str(Path(sys.executable).parent / "rocelab")
NOLAB = "zz-fuzz-nolab"  # a lab name nothing on any machine carries
# Every code a command can end with when no lab exists (docs/cli.md, "Exit codes"):
# 0 ok (--help, schema, list), 1 an output that cannot be written, 2 a bad file,
# 4 no such lab, 7 not root, 64 a bad command line.
DOCUMENTED = {ExitCode.OK, ExitCode.ERROR, ExitCode.BAD_FILE, ExitCode.NOT_FOUND,
              ExitCode.NOT_ROOT, ExitCode.USAGE}
LEFT_OUT = {("down", "all_labs")}  # acts on the machine's labs, not the run root's
# Commands that build a lab with no file given: `calibrate` runs its built-in incast (a
# minute of real labs per example). Its command line's errors are in test_cli_errors.py.
LEFT_OUT_COMMANDS = {"calibrate"}

HOSTILE = st.one_of(
    st.sampled_from([
        "", ".", "..", "/", "../victim", "../run", "../run/..", "/nonexistent/dir/file",
        "/proc/rocelab-fuzz", "{sandbox}/cwd/abs-output", "{sandbox}/victim", "a\nb", "lab\n",
        "x\0y", "a" * 300, "9" * 400, "-1", "-5G", "0", "1e309", "nan", "inf", "-inf",
        "18446744073709551617", "--help", "-h", "--", "-rf", "--all", "--json", "-w",
        "ñandú", "漢字", "\u202e", "🚀", "\t", " ", "$(reboot)", "`id`", "*", "~",
        NOLAB, "leaf1", "spine1", "prefill1", "decode1", "eth0", "1MiB", "10s", "1s",
        "write", "read", "write_bw", "127.0.0.1:0", "0.0.0.0:9464", "udp port 4791",
        "link", "node", "flap", "llama3-8b", "fp16", "4096",
    ]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.text(max_size=30),
)


def _params(cmd: click.Command) -> tuple[list[click.Option], list[click.Argument]]:
    options = [p for p in cmd.params if isinstance(p, click.Option)
               and (cmd.name, p.name) not in LEFT_OUT]
    return options, [p for p in cmd.params if isinstance(p, click.Argument)]


@st.composite
def invocations(draw: st.DrawFn) -> list[str]:
    """A command, some of its options (each with a hostile value unless a flag), then its
    arguments (hostile values; for a variadic one, zero to three)."""
    name = draw(st.sampled_from(sorted(set(main.commands) - LEFT_OUT_COMMANDS)))
    options, arguments = _params(main.commands[name])
    argv = [name]
    for opt in draw(st.lists(st.sampled_from(options), max_size=4, unique_by=lambda o: o.name)
                    if options else st.just([])):
        argv.append(draw(st.sampled_from(opt.opts + opt.secondary_opts)))
        if not opt.is_flag and not opt.count:
            argv += [draw(HOSTILE) for _ in range(max(opt.nargs, 1))]
    for arg in arguments:
        count = arg.nargs if arg.nargs > 0 else draw(st.integers(0, 3))
        if arg.nargs < 0 and draw(st.booleans()):
            argv.append("--")
        argv += [draw(HOSTILE) for _ in range(count)]
    if draw(st.integers(0, 9)) == 0:  # now and then a stray value where none belongs
        argv.insert(draw(st.integers(1, len(argv))), draw(HOSTILE))
    return argv


def snapshot(*roots: Path) -> dict[str, tuple[int, int, int]]:
    """path -> (mode, size, mtime) of everything under `roots` (links not followed)."""
    seen = {}
    for root in roots:
        if not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            for n in dirnames + filenames:
                st_ = os.lstat(os.path.join(dirpath, n))
                seen[os.path.join(dirpath, n)] = (st_.st_mode, st_.st_size, st_.st_mtime_ns)
    return seen


def root_links() -> set[str]:
    return set(os.listdir("/sys/class/net"))


def fuzz_namespaces() -> list[str]:
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return [line for line in done.stdout.splitlines() if line.startswith(NOLAB)]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """tmp/run (the private run root), tmp/victim (beside it: must not change), tmp/cwd (the
    working directory, where a relative output may legitimately land)."""
    tmp = tmp_path_factory.mktemp("cli-fuzz")
    (tmp / "run").mkdir()
    (tmp / "victim").mkdir()
    (tmp / "victim" / "data").write_text("precious\n")
    (tmp / "cwd").mkdir()
    return tmp


@pytest.fixture(scope="module")
def host(sandbox):
    """What must be the same after the module: the sandbox but its cwd, the host's FRR
    files, the root namespace's links, and no namespace named after the fuzz's lab."""
    def take():
        files = snapshot(sandbox / "run", sandbox / "victim", Path("/etc/frr"), Path("/run/frr"))
        return files, root_links()
    before = take()
    yield
    after = take()
    changed = sorted(set(before[0].items()) ^ set(after[0].items()))
    assert not changed, f"the CLI fuzz changed files outside its working directory: {changed[:10]}"
    assert before[1] == after[1], f"root-namespace links changed: {before[1] ^ after[1]}"
    assert fuzz_namespaces() == []
    assert not (Path("/run/rocelab") / NOLAB).exists()  # the machine's run root: others' labs


@pytest.fixture
def in_sandbox(sandbox, host, monkeypatch):
    monkeypatch.setattr(paths, "RUN_ROOT", sandbox / "run")
    monkeypatch.setattr(state, "RUN_ROOT", sandbox / "run")
    monkeypatch.setenv("ROCELAB_RUN_ROOT", str(sandbox / "run"))
    monkeypatch.chdir(sandbox / "cwd")
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    yield sandbox
    for s, h in handlers.items():
        signal.signal(s, h)


def check(argv: list[str], code: int, stderr: str, escaped: str = "") -> None:
    shown = " ".join(repr(a) for a in argv)[:300]
    assert not escaped, f"rocelab {shown}: an exception escaped the CLI:\n{escaped}"
    assert "Traceback" not in stderr, f"rocelab {shown}: a traceback:\n{stderr}"
    assert code in DOCUMENTED, f"rocelab {shown}: exit {code}, not in the table: {stderr}"
    assert argv[0] not in CODES or code in CODES[argv[0]], (
        f"rocelab {shown}: exit {code}, not in {argv[0]}'s row of cli/exitcodes.py: {stderr}")
    if code != ExitCode.OK:
        lines = stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("rocelab: error: "), (
            f"rocelab {shown}: exit {code}, want one `rocelab: error:` line, got:\n{stderr}")


def _fill(argv: list[str], sandbox: Path) -> list[str]:
    return [a.replace("{sandbox}", str(sandbox)) for a in argv]


@FUZZ
@given(argv=invocations())
@example(argv=["check", "0\x0c"])  # found by this fuzz: a form feed split the error line in two
@example(argv=["status", "lab\n"])  # issue 24 (12): a two-line error
@example(argv=["validate", "x\0y"])  # NUL: a ValueError escaped as a traceback
@example(argv=["down", "../victim"])
def test_every_command_line_ends_in_ok_or_one_documented_error(argv, in_sandbox):
    argv = _fill(argv, in_sandbox)
    t0 = time.monotonic()
    res = CliRunner().invoke(main, argv)
    elapsed = time.monotonic() - t0
    code = res.exit_code
    escaped = ""
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        escaped = "".join(traceback.format_exception(*res.exc_info)) if res.exc_info else repr(res.exception)
    check(argv, code, res.stderr, escaped)
    assert elapsed < BOUND_S, f"rocelab {argv!r}: {elapsed:.1f} s"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


@settings(FUZZ, max_examples=SUBPROCESS_EXAMPLES)
@given(argv=invocations().filter(lambda a: not any("\0" in x for x in a)))  # execve: no NUL
def test_the_installed_command_too_under_a_memory_limit(argv, in_sandbox):
    argv = _fill(argv, in_sandbox)
    env = dict(os.environ, ROCELAB_RUN_ROOT=str(in_sandbox / "run"))
    res = subprocess.run([ROCELAB, *argv], capture_output=True, text=True, errors="replace",
                         cwd=in_sandbox / "cwd", env=env, stdin=subprocess.DEVNULL, timeout=BOUND_S,
                         preexec_fn=_limit_memory)
    check(argv, res.returncode, res.stderr)


def test_the_fuzz_reaches_every_command_and_option():
    """The strategy is built from the click tree: every command, every option but LEFT_OUT."""
    for name, cmd in main.commands.items():
        options, _ = _params(cmd)
        assert {o.name for o in options} | {p for c, p in LEFT_OUT if c == name} == {
            p.name for p in cmd.params if isinstance(p, click.Option)}
