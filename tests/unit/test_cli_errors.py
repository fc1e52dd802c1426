"""Every command, given a bad command line: one line on stderr, the documented exit code, no traceback.

docs/cli.md promises that every error is one line `rocelab: error: ...` and an
exit code from its table (64 bad command line, 2 bad topology or experiment
file, 4 no such lab, node or port, 1 an output that cannot be written, 7 not
root). Commands that act on a running lab are given a lab that does not exist,
or `FAKE`: a lab whose state file exists (in a private run root) but none of
whose namespaces do, so its nodes can be looked up and nothing can be touched.
No lab is built: this stays a fast unit test.

Commands appear here as they are registered (`list`, `vtysh`, `capture`, ...):
cases of a command that does not exist are left out, and every registered
command gets a misspelt option and (where it takes any) missing arguments.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from emulator import paths, state
from emulator.cli import main
from emulator.cli.exitcodes import CODES
from emulator.errors import ExitCode

ROOT = Path(__file__).resolve().parents[2]
TOPO = str(ROOT / "topologies" / "clos-2x4.yaml")
EXPERIMENT = str(ROOT / "experiments" / "incast.yaml")
ROCELAB = str(Path(sys.executable).parent / "rocelab")
NOLAB = "h3-unit-nosuchlab"  # no trace of it anywhere
FAKE = "h3-unit-fake"  # a state file, no namespaces, no processes
IS_ROOT = os.geteuid() == 0

USAGE, BAD_FILE, NOT_FOUND, ERROR = ExitCode.USAGE, ExitCode.BAD_FILE, ExitCode.NOT_FOUND, ExitCode.ERROR


@dataclass
class Case:
    args: list[str]
    code: int
    after_root: bool = False  # the command checks for root first: 7 when the tests do not run as root

    @property
    def command(self) -> str:
        return self.args[0]

    def param(self):
        return pytest.param(self, id=" ".join(self.args).replace(str(ROOT) + "/", ""))


def lab(args: str | list[str], code: int, **kw) -> Case:
    """A case on a lab (NOLAB or FAKE): the command checks for root before it looks."""
    return Case(args.split() if isinstance(args, str) else args, code, after_root=True, **kw)


def cli(args: str | list[str], code: int, **kw) -> Case:
    return Case(args.split() if isinstance(args, str) else args, code, **kw)



CASES = [
    # up: the file is checked (and the options parsed) before root or the kernel
    cli(["up", "/nonexistent/topology.yaml"], BAD_FILE),
    cli(["up", "{list_yaml}"], BAD_FILE),
    cli(["up", "{tmp}"], USAGE),  # a directory
    cli(["up", TOPO, "--name", "Not_A_Name"], USAGE),  # a bad name is a bad command line
    cli(["up", TOPO, "--name", "x" * 17], USAGE),  # 15 before the first dash
    cli(["up", TOPO, "--name", ""], USAGE),
    # (a missing file: were the option not checked first, this exits 2 and builds nothing)
    cli(["up", "/nonexistent/topology.yaml", "--timeout", "0"], USAGE),
    cli(["up", "/nonexistent/topology.yaml", "--timeout", "-5"], USAGE),
    cli(["up", "/nonexistent/topology.yaml", "--timeout", "soon"], USAGE),
    cli(["up", "/nonexistent/topology.yaml", "--tiemout", "5"], USAGE),
    cli(["up", TOPO, "--templates", "/nonexistent/templates"], USAGE),
    cli(["up", "/nonexistent/topology.yaml", "--metrics", "localhost:9464"], USAGE),
    # down
    cli("down", USAGE),
    cli(f"down {NOLAB} --all", USAGE),
    # issue 24: a lab name is checked before anything is looked up or removed with it
    cli(["down", "../victim"], USAGE),
    cli(["down", "/"], USAGE),
    cli(["down", ".."], USAGE),
    cli(["down", "."], USAGE),
    cli(["down", ""], USAGE),
    cli(["down", "", "--all"], USAGE),
    # issue 24 (12): "" is not "not given"; a newline or 300 characters: one line naming NAME
    *(cli([c, ""], USAGE) for c in ("status", "wait", "validate", "top", "save", "diagnose")),
    *(cli([c, "lab\nx"], USAGE) for c in ("status", "wait", "validate", "top", "diagnose", "down")),
    *(cli([c, "a" * 300], USAGE) for c in ("status", "wait", "validate", "top", "diagnose", "down")),
    cli(["exec", "", "leaf1", "--", "true"], USAGE),
    cli(["exec", FAKE, "../leaf1", "--", "true"], USAGE),
    cli(["vtysh", FAKE, "leaf1\n", "-c", "show-version"], USAGE),
    cli(["transfer", FAKE, "--src", "/", "--dst", "decode1", "--size", "1MiB"], USAGE),
    cli(["metrics", "", "--once"], USAGE),
    cli(["capture", FAKE, "", "eth0"], USAGE),
    cli("down --prefix it-", USAGE),  # --prefix only narrows --all
    cli(["down", "--all", "--prefix", ""], USAGE),  # an empty prefix is not "every lab"
    # status, wait, validate on a lab
    lab(f"status {NOLAB}", NOT_FOUND),
    lab(f"status {NOLAB} --json", NOT_FOUND),
    cli(f"status {NOLAB} --jsno", USAGE),
    lab(f"wait {NOLAB}", NOT_FOUND),
    cli(f"wait {NOLAB} --until never", USAGE),
    cli(f"wait {NOLAB} --timeout -1", USAGE),
    lab(f"validate {NOLAB}", NOT_FOUND),
    lab(f"validate {FAKE} --check nosuchcheck", USAGE),
    cli(["validate", TOPO, "--junit", "/nonexistent/dir/validate.xml"], ERROR),
    # exec
    lab(f"exec {NOLAB} leaf1 -- true", NOT_FOUND),
    lab(f"exec {FAKE} nosuchnode -- true", NOT_FOUND),
    cli(f"exec {FAKE} leaf1", USAGE),
    # render
    cli(["render", "/nonexistent/topology.yaml", "-o", "{tmp}/r"], BAD_FILE),
    cli(["render", "{list_yaml}", "-o", "{tmp}/r"], BAD_FILE),
    cli(["render", TOPO], USAGE),
    cli(["render", TOPO, "-o", "/proc/rocelab-render"], ERROR),
    cli(["render", TOPO, "-o", "{foreign_dir}"], ERROR),
    cli(["render", TOPO, "-o", "{list_yaml}"], USAGE),  # a file
    cli(["render", TOPO, "-o", "{tmp}/r", "--nmae", "x"], USAGE),
    cli(["render", TOPO, "-o", "{tmp}/r", "--templates", "/nonexistent/templates"], USAGE),
    # save (a running lab's configs): the directory is checked before any router is asked
    lab(f"save {NOLAB} -o /nonexistent/s", NOT_FOUND),
    cli(f"save {FAKE}", USAGE),  # -o is required
    lab(["save", FAKE, "-o", "{foreign_dir}"], ERROR),
    cli(["save", FAKE, "-o", "{list_yaml}"], USAGE),  # a file
    # export (no root)
    cli(["export", "/nonexistent/topology.yaml", "-o", "{tmp}/x"], BAD_FILE),
    cli(["export", TOPO], USAGE),
    cli(["export", TOPO, "-o", "{tmp}/x", "--format", "gns3"], USAGE),
    cli(["export", TOPO, "-o", "{tmp}/x", "--templates", "/nonexistent/templates"], USAGE),
    cli(["export", TOPO, "-o", "/proc/rocelab-export"], ERROR),
    cli(["export", TOPO, "-o", "{foreign_dir}"], ERROR),
    cli(["export", TOPO, "-o", "{list_yaml}"], USAGE),  # a file
    # schema
    cli("schema extra", USAGE),
    cli("schema --jsno", USAGE),
    # perftest
    cli(f"perftest {FAKE} write_bw --src prefill1 --dst decode1 --tclass 256", USAGE),
    cli(f"perftest {FAKE} write_bw --src prefill1 --dst decode1 --tclass x", USAGE),
    cli(f"perftest {FAKE} write_bw --src prefill1 --dst decode1 --rate_limit -1", USAGE),
    # issue 25: a missing or conflicting role, one host twice, a negative -n or -D were exit 1
    # after the lab was looked up; each is a bad command line, refused before root or the lab
    *(cli(f"perftest {FAKE} write_bw {args}", USAGE) for args in (
        "--src prefill1", "--dst decode1", "", "--server", "--server --on decode1 --src prefill1",
        "--on decode1 --src prefill1 --dst decode1", "--src prefill1 --dst prefill1",
        "--src prefill1 --dst decode1 -n -1", "--src prefill1 --dst decode1 -D -1",
        "--src prefill1 --dst decode1 -q 0", "--src prefill1 --dst decode1 -q 65",
        "--src prefill1 --dst decode1 -s 16MiB", "--src prefill1 --dst decode1 -s 1.5",
        "--src prefill1 --dst decode1 -a -D 2")),
    cli(f"perftest {FAKE} write_lat --src prefill1 --dst decode1 -b", USAGE),
    cli(f"perftest {FAKE} write_lat --src prefill1 --dst decode1 -n 3", USAGE),
    lab(f"perftest {NOLAB} write_bw --src prefill1 --dst decode1", NOT_FOUND),
    lab(f"perftest {FAKE} write_bw --src nosuchhost --dst decode1", NOT_FOUND),
    # transfer
    lab(f"transfer {NOLAB} --src prefill1 --dst decode1 --size 1MiB", NOT_FOUND),
    cli(f"transfer {FAKE} --src prefill1 --dst decode1", USAGE),
    cli(f"transfer {FAKE} --src prefill1 --dst decode1 --size 1MiB --op copy", USAGE),
    lab(f"transfer {FAKE} --src prefill1 --dst decode1 --size 1MiB --rate -5G", USAGE),
    lab(f"transfer {FAKE} --src nosuchhost --dst decode1 --size 1MiB", NOT_FOUND),
    cli(f"transfer {NOLAB} --src prefill1 --dst decode1 --size -1", USAGE),
    cli(f"transfer {FAKE} --src prefill1 --dst decode1 --size 0", USAGE),
    cli(f"transfer {FAKE} --src prefill1 --dst decode1 --size 1MiB --qps 0", USAGE),
    cli(f"transfer {FAKE} --src prefill1 --dst decode1 --size 1MiB --mtu 9000", USAGE),
    cli(f"transfer {FAKE} --src prefill1 --dst decode1 --size 1MiB --transport tcp", USAGE),
    cli(f"transfer {FAKE} --src prefill1 --dst decode1 --size 1MiB --transport mrc --evs 0",
        USAGE),
    cli(f"transfer {FAKE} --src prefill1 --dst decode1 --size 1MiB --evs 1025", USAGE),
    cli(f"transfer {FAKE} --src prefill1 --dst decode1 --size 1MiB --transport mrc --op read",
        USAGE),  # MRC is WRITE only
    # issue 24: 1.5 moved 1 byte; --rate 1K ran for hours
    cli(f"transfer {FAKE} --src prefill1 --dst decode1 --size 1.5", USAGE),
    cli(f"transfer {FAKE} --src prefill1 --dst decode1 --size 0.3KiB", USAGE),
    cli(f"transfer {FAKE} --src prefill1 --dst decode1 --size 1MiB --max-duration 0", USAGE),
    cli(f"transfer {FAKE} --src prefill1 --dst decode1 --size 1MiB --max-duration 1e400", USAGE),
    cli(f"transfer {FAKE} --src prefill1 --dst decode1 --size 1MiB --max-duration 200h", USAGE),
    lab(f"transfer {FAKE} --src prefill1 --dst decode1 --size 64MiB --rate 1K", USAGE),
    lab(f"transfer {FAKE} --src prefill1 --dst decode1 --size 1MiB --rate 1K --max-duration 1h",
        USAGE),
    cli(f"kv {FAKE} --max-duration -1s", USAGE),
    cli(f"transfer {FAKE} --src prefill1 --dst decode1 --size {'9' * 400}KiB", USAGE),
    # kv
    lab(f"kv {NOLAB}", NOT_FOUND),
    cli(f"kv {FAKE} --model nosuchmodel", USAGE),
    cli(f"kv {FAKE} --tokens -1", USAGE),
    cli(f"kv {FAKE} --block 0", USAGE),
    cli(f"kv {FAKE} --requests -1", USAGE),
    cli(f"kv {FAKE} --requests 0", USAGE),  # was silently "one per pair"
    cli(f"kv {FAKE} --concurrency 0", USAGE),
    cli(f"kv {FAKE} --qps 0", USAGE),
    cli(f"kv {FAKE} --out /etc/hostname/report", USAGE),  # under a file: caught before running
    cli(f"kv {FAKE} --qps 65", USAGE),
    cli(f"kv {FAKE} --transport mrc --evs 2000", USAGE),
    cli(f"kv {FAKE} --transport mrc --op read", USAGE),
    cli(f"kv {FAKE} --mtu 1000", USAGE),
    cli(f"kv {FAKE} --mtu big", USAGE),
    lab(f"kv {FAKE} --pairs nosuchhost:decode1", NOT_FOUND),
    # run, check
    lab("run /nonexistent/experiment.yaml --out {tmp}/o", BAD_FILE),
    lab("run {list_yaml} --out {tmp}/o", BAD_FILE),
    cli(["run", EXPERIMENT], USAGE),
    cli(["run", EXPERIMENT, "--out", "/etc/hostname/out"], USAGE),  # before the lab, not after
    # calibrate: every rate of the ladder is checked before root or the kernel
    cli(["calibrate", "--rates", "100M,fast"], USAGE),
    cli(["calibrate", "--rates", "100M,0M"], USAGE),
    cli(["calibrate", "--rates", ","], USAGE),
    cli(["calibrate", "--rates", "20M,100M"], USAGE),  # below the incast's own rate
    cli(["calibrate", "--rates", "100M,100000K"], USAGE),  # the same rate twice
    cli(["calibrate", "--name", "Not_A_Name"], USAGE),
    cli(["check", "/nonexistent/experiment.yaml"], BAD_FILE),
    cli(["check", TOPO], BAD_FILE),  # a topology is not an experiment
    # fail, heal
    lab(f"fail {NOLAB} link leaf1 spine1", NOT_FOUND),
    lab(f"fail {FAKE} link leaf1 nosuchnode", NOT_FOUND),
    lab(f"fail {FAKE} link leaf1 leaf2", NOT_FOUND),  # no such link
    lab(f"fail {FAKE} node nosuchnode", NOT_FOUND),
    lab(f"fail {FAKE} bogus leaf1", USAGE),
    cli(f"fail {FAKE}", USAGE),
    cli(f"fail {FAKE} flap leaf1 spine1 --period -1s", USAGE),
    cli(f"fail {FAKE} flap leaf1 spine1 --period 0", USAGE),
    cli(f"fail {FAKE} flap leaf1 spine1 --count 0", USAGE),
    cli(f"fail {FAKE} link leaf1 spine1 --timeout -1", USAGE),
    cli(f"fail {FAKE} link leaf1 spine1 --slient", USAGE),
    lab(f"heal {NOLAB} --all", NOT_FOUND),
    lab(f"heal {FAKE} node nosuchnode", NOT_FOUND),
    lab(f"heal {FAKE} link leaf1 leaf2", NOT_FOUND),
    cli(f"heal {FAKE}", USAGE),
    cli(f"heal {FAKE} --all node spine1", USAGE),
    cli(f"heal {FAKE} --all --timeout -1", USAGE),
    # metrics, top
    lab(f"metrics {NOLAB} --once", NOT_FOUND),
    cli(f"metrics {FAKE} --listen nowhere", USAGE),
    cli(f"metrics {FAKE} --listen 127.0.0.1:99999", USAGE),
    lab(f"top {NOLAB} --once", NOT_FOUND),
    cli(f"top {FAKE} --once --interval -1", USAGE),
    cli(f"top {FAKE} --once --interval 0", USAGE),
    cli(f"top {FAKE} --once --rows 0", USAGE),
    # diagnose: the window and the results file are checked before root or the lab
    lab(f"diagnose {NOLAB}", NOT_FOUND),
    cli(f"diagnose {FAKE} --window 0", USAGE),
    cli(f"diagnose {FAKE} --window soon", USAGE),
    cli(["diagnose", "--results", "/nonexistent/results.json"], USAGE),
    cli(["diagnose", "--results", "{list_yaml}"], BAD_FILE),
    cli(["diagnose", FAKE, "--results", "{list_yaml}"], USAGE),
    lab(f"diagnose {FAKE} --src nosuchhost --window 1s", USAGE),
    # --flow names a run's flow: refused on a live lab before root, the lab or any sampling
    cli(f"diagnose {FAKE} --flow victim", USAGE),
    cli("diagnose --flow victim --window 1s", USAGE),
    # graph (no root)
    cli(["graph", TOPO, "-o", "/nonexistent-dir/fabric.png"], ERROR),
    cli(["graph", TOPO, "-o", "/proc/fabric.png"], ERROR),
    cli(["graph", TOPO, "-o", "{tmp}/fabric.pdf"], ERROR),  # (test_report.py pins 1, not 64)
    cli(["graph", "/nonexistent/topology.yaml"], BAD_FILE),
    cli(["graph", TOPO, "--results", "/nonexistent/results.json"], USAGE),
    cli(["graph", TOPO, "--results", "{list_yaml}", "-o", "{tmp}/fabric.png"], ERROR),
    # the testers' tools, as they appear
    cli("list extra", USAGE),
    cli("list --jsno", USAGE),
    lab(f"vtysh {NOLAB} leaf1 -c show-version", NOT_FOUND),
    lab(f"vtysh {FAKE} nosuchnode -c show-version", NOT_FOUND),
    lab(f"vtysh {FAKE} prefill1 -c show-version", NOT_FOUND),  # a host has no FRR
    lab(f"capture {NOLAB} leaf1 spine1", NOT_FOUND),
    lab(f"capture {FAKE} leaf1 nosuchport", NOT_FOUND),
    lab(f"capture {FAKE} nosuchnode eth0", NOT_FOUND),
    cli(f"capture {FAKE} leaf1 spine1 --count -1", USAGE),
    lab(f"capture {FAKE} leaf1 spine1 --duration -1s", USAGE),
]


def _generated() -> list[Case]:
    """For every registered command: a misspelt option, and no arguments when it needs some."""
    cases = []
    for name, cmd in sorted(main.commands.items()):
        options = [o for p in cmd.params if isinstance(p, click.Option)
                   for o in p.opts if o.startswith("--") and o != "--help"]
        cases.append(cli([name, f"--{options[0][2:]}x" if options else "--no-such-option", "x"], USAGE))
        if any(isinstance(p, click.Argument) and p.required for p in cmd.params):
            cases.append(cli([name], USAGE))
    return cases


ALL = [c for c in CASES if c.command in main.commands] + _generated()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Paths the cases name, and FAKE's state file under a private run root."""
    tmp = tmp_path_factory.mktemp("cli-errors")
    (tmp / "list.yaml").write_text("- not\n- a mapping\n")
    (tmp / "foreign").mkdir()
    (tmp / "foreign" / "notes.txt").write_text("someone's\n")
    run_root = tmp / "run"
    spec = yaml.safe_load(Path(TOPO).read_text()) | {"name": FAKE}
    (run_root / FAKE).mkdir(parents=True)
    (run_root / FAKE / "state.json").write_text(json.dumps({"lab": FAKE, "topology": TOPO, "spec": spec}))
    return {"tmp": str(tmp), "list_yaml": str(tmp / "list.yaml"), "foreign_dir": str(tmp / "foreign"),
            "run_root": run_root}


@pytest.fixture
def rocelab(files, monkeypatch):
    """Run the CLI in-process (fast) against the private run root; `up` may set a SIGTERM handler."""
    monkeypatch.setattr(paths, "RUN_ROOT", files["run_root"])
    monkeypatch.setattr(state, "RUN_ROOT", files["run_root"])
    sigterm = signal.getsignal(signal.SIGTERM)

    def run(args: list[str]):
        return CliRunner().invoke(main, [a.format(**files) for a in args])
    yield run
    signal.signal(signal.SIGTERM, sigterm)


def assert_one_error_line(res, code: int) -> None:
    """One `rocelab: error:` line on stderr, exit `code`, no exception escaping the CLI."""
    import traceback
    escaped = "".join(traceback.format_exception(*res.exc_info)) if res.exc_info else ""
    assert isinstance(res.exception, SystemExit), f"an exception escaped the CLI:\n{escaped}"
    assert "Traceback" not in res.output
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("rocelab: error: "), (
        f"want one `rocelab: error:` line on stderr, got {len(lines)}:\n{res.stderr}")
    assert res.exit_code == code, f"exit {res.exit_code}, want {code}: {lines[0]}"


@pytest.mark.parametrize("case", [c.param() for c in ALL])
def test_a_bad_command_line_is_one_line_and_the_documented_code(case, rocelab):
    res = rocelab(case.args)
    want = ExitCode.NOT_ROOT if case.after_root and not IS_ROOT else case.code
    assert_one_error_line(res, want)
    assert want in CODES[case.command], f"exit {want} is not in {case.command}'s row of cli/exitcodes.py"
    if case.code == NOT_FOUND and want == NOT_FOUND:
        assert case.args[1] in res.stderr, res.stderr  # says in which lab it looked


def test_every_numeric_option_has_a_bad_value_case():
    """Issue 15: CLI bad-argument cases for every numeric option of every command."""
    from emulator.cli.options import Quantity

    covered = {(c.command, a) for c in CASES for a in c.args if a.startswith("--")}
    missing = []
    for name, cmd in main.commands.items():
        for p in cmd.params:
            numeric = isinstance(p.type, (click.IntRange, click.FloatRange, Quantity)) or \
                p.type in (click.INT, click.FLOAT) or p.name == "mtu"
            if isinstance(p, click.Option) and numeric and p.opts[0].startswith("--"):
                if not any((name, o) in covered for o in p.opts):
                    missing.append(f"{name} {p.opts[0]}")
    assert not missing, f"numeric options without a bad-value case: {missing}"


def test_every_registered_command_has_hand_written_cases():
    """A new command gets its own bad arguments here, not only a misspelt option."""
    assert {c.command for c in CASES} >= set(main.commands), (
        f"no cases for {sorted(set(main.commands) - {c.command for c in CASES})}")


@pytest.mark.parametrize("name", sorted(main.commands))
def test_every_command_has_help(name, rocelab):
    res = rocelab([name, "--help"])
    assert res.exit_code == 0 and res.stdout.startswith("Usage: ") and not res.stderr, res.output


def test_the_installed_command_prints_json_errors_and_no_traceback(files):
    """The real entry point, as a script sees it: exit code, one stderr line, the JSON error."""
    env = dict(os.environ, ROCELAB_RUN_ROOT=str(files["run_root"]))
    res = subprocess.run([ROCELAB, "status", NOLAB, "--json"], capture_output=True, text=True, env=env,
                         timeout=60)
    want = ExitCode.NOT_FOUND if IS_ROOT else ExitCode.NOT_ROOT
    assert res.returncode == want and res.stderr.count("\n") == 1, res.stderr
    assert json.loads(res.stdout)["error"]["code"] == want
    res = subprocess.run([ROCELAB, "top", FAKE, "--once", "--interval", "-1"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert res.returncode == ExitCode.USAGE and res.stderr.startswith("rocelab: error: "), res.stderr
    assert "Traceback" not in res.stderr and res.stderr.count("\n") == 1


def test_fail_help_describes_the_fault_the_code_injects(rocelab):
    """Carrier loss downs both router ends of a link (docs/faults.md says why), never a host's own."""
    from emulator import faults
    from emulator.lab import load_topology
    plan = load_topology(TOPO)[1]
    fabric = faults.effects_of(plan, faults.link_fault(plan, "leaf1", "spine1"))
    host = faults.effects_of(plan, faults.link_fault(plan, "leaf1", "prefill1"))
    assert {(e.kind.value, e.node) for e in fabric} == {("down", "leaf1"), ("down", "spine1")}
    assert {(e.kind.value, e.node) for e in host} == {("down", "leaf1")}
    text = " ".join(rocelab(["fail", "--help"]).stdout.split())
    assert "carrier loss: both router ends of the link go down" in text
    assert "a host's own end stays up" in text
    assert "NO-CARRIER" not in text and "A's port goes down" not in text


def test_diagnose_says_flow_needs_a_run_s_results(rocelab):
    """A live window records no flows: the help and docs/diagnose.md say --flow needs
    --results, and --flow on a live lab is one line naming --flow and what works instead,
    before any sampling (an hour's window would time the test out)."""
    text = " ".join(rocelab(["diagnose", "--help"]).stdout.split())
    assert "--flow to a run's flow, so it needs --results" in text and "--flow victim" not in text
    live = [ln for ln in (ROOT / "docs" / "diagnose.md").read_text().splitlines()
            if ln.startswith("rocelab diagnose LAB")]
    assert live and not any("--flow" in ln for ln in live), live
    res = rocelab(["diagnose", FAKE, "--flow", "victim", "--window", "1h"])
    assert_one_error_line(res, ExitCode.USAGE)
    assert all(w in res.stderr for w in ("--flow", "--results", "--src and --dst")), res.stderr


def test_the_hint_after_up_suggests_a_ping_that_ends(capsys):
    """`up` ends with commands to try next; a bare `ping` would never return."""
    from emulator.cli import up
    from emulator.lab import load_topology
    plan = load_topology(TOPO)[1]
    up._print(plan, {k: 0.1 for k in ("total_s", "realize_s", "daemons_start_s", "bgp_converged_s",
                                      "verified_s")}, None)
    hint = capsys.readouterr().out
    assert f"rocelab exec clos-2x4 prefill1 -- ping -c 3 {plan.hosts[-1].address}" in hint
