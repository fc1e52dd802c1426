"""Integration fixtures: real labs in namespaces, always destroyed, and proof the host is untouched.

Every lab built here is named `it-*` (or $ROCELAB_TEST_PREFIX*); the session fixture snapshots the root
namespace (links, addresses, routes, selected sysctls and the neighbour-table limits,
nftables) and the host's FRR (/etc/frr's contents, /run/frr's listing) before the first
test and compares after the last, and checks that no `it-*` namespace, process or run dir
survives.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emulator import netns, state
from emulator.procs import tagged_processes

ROCELAB = str(Path(sys.executable).parent / "rocelab")
# Lab names start with this; set ROCELAB_TEST_PREFIX to run two suites side by side.
PREFIX = os.environ.get("ROCELAB_TEST_PREFIX", "it-")
SYSCTLS = [
    "net/ipv4/ip_forward", "net/ipv4/fib_multipath_hash_policy", "net/ipv6/fib_multipath_hash_policy",
    "net/ipv6/conf/all/forwarding", "net/ipv6/conf/all/accept_dad", "net/ipv6/conf/default/accept_dad",
    "net/ipv4/conf/all/rp_filter", "net/ipv4/conf/default/rp_filter",
    "net/ipv4/conf/all/ignore_routes_with_linkdown", "net/ipv6/conf/all/disable_ipv6",
    *[f"net/{fam}/neigh/default/gc_thresh{n}" for fam in ("ipv4", "ipv6") for n in (1, 2, 3)],
]
HOST_FRR_CONFIG, HOST_FRR_RUN = Path("/etc/frr"), Path("/run/frr")
UNNUM = f"{PREFIX}unnum"  # clos_unnumbered's lab, shared by the session
# clos_cc's lab (clos-2x4-cc), shared by the modules that use it; named PREFIX-cc-l3 so that
# a compare experiment run with --name PREFIX-cc finds it running as its `l3` fabric.
SHAPED = f"{PREFIX}cc-l3"
# Modules whose tests need longer than pytest-timeout's default (pyproject.toml): the
# bound covers the module's lab coming up in its first test. Seconds.
LONG = {"test_scale.py": 900, "test_rxe.py": 900, "test_rxe_ecn.py": 900,
        "test_rxe_interop.py": 900, "test_rxe_telemetry.py": 900, "test_rxe_transfer.py": 900,
        "test_engine.py": 600, "test_experiments.py": 600, "test_diagnose.py": 600,
        "test_gray.py": 600, "test_neighbours.py": 600, "test_ci.py": 600,
        "test_frr_config.py": 600, "test_telemetry.py": 600, "test_compare_run.py": 600,
        "test_mrc_experiments.py": 600,
        "test_l2_demos.py": 600}


def pytest_collection_modifyitems(items):
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
            if (seconds := LONG.get(Path(str(item.fspath)).name)) and not item.get_closest_marker("timeout"):
                item.add_marker(pytest.mark.timeout(seconds))


def _need_root_and_frr():
    if os.geteuid() != 0:
        pytest.skip("integration tests need root")
    if not Path("/usr/lib/frr/zebra").exists():
        pytest.fail("FRR is not installed: run `make setup`")


def _ip_json(*args: str):
    out = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=True).stdout
    return json.loads(out or "[]")


def root_snapshot() -> dict:
    """What a lab must never change in the root namespace."""
    links = [{k: link.get(k) for k in ("ifname", "flags", "mtu", "address", "link_type", "master")}
             for link in _ip_json("link", "show")]
    addrs = [{"ifname": a["ifname"], "addr": sorted(f"{i['local']}/{i['prefixlen']}"
              for i in a.get("addr_info", []))} for a in _ip_json("addr", "show")]
    sysctls = {k: Path(f"/proc/sys/{k}").read_text().strip() for k in SYSCTLS}
    nft = shutil.which("nft") and subprocess.run(["nft", "list", "ruleset"], capture_output=True,
                                                 text=True).stdout
    return {"links": links, "addrs": addrs, "routes4": _ip_json("route", "show", "table", "all"),
            "routes6": _ip_json("-6", "route", "show", "table", "all"), "sysctls": sysctls,
            "nft": nft, "rules": _ip_json("rule", "show"), "frr_config": tree_digests(HOST_FRR_CONFIG),
            "frr_run": tree_listing(HOST_FRR_RUN)}


def tree_digests(root: Path) -> dict[str, str]:
    """Every file under root (not following links) -> its SHA-256; a link -> its target."""
    out = {}
    for path in sorted(root.rglob("*")) if root.is_dir() else []:
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = "-> " + os.readlink(path)
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def tree_listing(root: Path) -> list[str]:
    """Names under root (sockets, pid files: their contents change as the host's FRR runs)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.is_dir() else []


def leftovers(name_prefix: str = PREFIX) -> dict:
    ns = [n for n in netns.list_names() if n.startswith(name_prefix)]
    procs = [p for p, tag in tagged_processes().items() if tag.startswith(name_prefix)]
    dirs = [d for d in state.run_dir_labs() if d.startswith(name_prefix)]
    return {k: v for k, v in {"namespaces": ns, "processes": procs, "run_dirs": dirs}.items() if v}


@pytest.fixture(scope="session", autouse=True)
def host_untouched():
    _need_root_and_frr()
    if PREFIX and (found := leftovers()):  # (an empty prefix would name every lab here)
        # An earlier run that was killed (a timeout, SIGKILL, a machine reclaimed mid-run) had
        # no chance to tear down; its labs carry this run's prefix, so remove them the way a
        # user would after a crash, by name, and prove below that nothing of them survives.
        sys.stderr.write(f"removing leftovers of an earlier, killed run: {found}\n")
        cli("down", "--all", "--prefix", PREFIX, "--quiet", timeout=300)
    assert not leftovers(), f"leftovers from an earlier run that `down` could not remove: {leftovers()}"
    before = root_snapshot()
    yield
    after = root_snapshot()
    for key in before:
        assert after[key] == before[key], f"the host changed: {key}"
    assert not leftovers(), f"tests left lab resources behind: {leftovers()}"


def cli(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    res = subprocess.run([ROCELAB, *args], capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise AssertionError(f"rocelab {' '.join(args)} -> {res.returncode}\n{res.stderr}")
    return res


class Lab:
    """A running lab for a test; `down` is guaranteed by the fixture."""

    def __init__(self, topology: str, name: str):
        self.topology, self.name = topology, name

    def up(self, *extra: str):
        res = cli("up", self.topology, "--name", self.name, *extra)
        self.plan = state.lab_plan(self.name)
        return res

    def status(self) -> dict:
        return json.loads(cli("status", self.name, "--json", check=False).stdout)

    def exec(self, node: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return cli("exec", self.name, node, "--", *argv, check=check)

    def down(self):
        return cli("down", self.name)


def make_lab(topology: str, name: str, *up_args: str):
    lab_ = Lab(topology, name)
    try:
        lab_.up(*up_args)
        yield lab_
    finally:
        cli("down", name, check=False)


def make_rxe_lab(topology: str, name: str, *up_args: str):
    """make_lab for a topology with rxe hosts: fails (never skips) without the guest
    kernel that `make setup` fetches."""
    from emulator.rxe import guest

    if guest.installed() is None:
        pytest.fail("no rxe guest kernel: `make setup` runs `python -m emulator.rxe.guest fetch`")
    yield from make_lab(topology, name, *up_args)


def rxe_vm(lab_: Lab, host: str):
    """The RxeVm of one of the lab's rxe hosts (exec, spawn, counters in its guest)."""
    from emulator.rxe.hosts import vm_for

    return vm_for(lab_.plan, lab_.plan.node(host))


@pytest.fixture(scope="session")
def _shared_unnumbered():
    """Holds clos_unnumbered's lab while it is up; takes it down at the session's end."""
    held: dict[str, Lab | None] = {"lab": None}
    yield held
    if held["lab"] is not None:
        cli("down", UNNUM, check=False)


@pytest.fixture(scope="module")
def clos_unnumbered(_shared_unnumbered):
    """clos-2x4, shared by every module that needs the plain fabric and leaves it as it
    found it (faults healed, loss cleared): test_fabric, test_engine, test_exec_isolation,
    test_experiments (spine-failure.yaml), test_faults, test_gray, test_kv_serving and
    test_perftest (and test_mrc). Up on first use; a module that needs the
    host to hold no other lab (test_neighbours: the neighbour limit is restored by the
    last `down`) takes it down with `no_shared_lab`, and the next user brings it up again.
    A module that brings it down itself, or needs it fresh (test_cli_tools reads its age,
    test_vtysh_confined restarts it), has its own."""
    if _shared_unnumbered["lab"] is None:
        lab_ = Lab("topologies/clos-2x4.yaml", UNNUM)
        try:
            lab_.up()
        except BaseException:
            cli("down", UNNUM, check=False)
            raise
        _shared_unnumbered["lab"] = lab_
    return _shared_unnumbered["lab"]


@pytest.fixture(scope="module")
def no_shared_lab(_shared_unnumbered, _shared_labs):
    """The session's shared labs taken down for a module that needs no other lab up."""
    if _shared_unnumbered["lab"] is not None:
        _shared_unnumbered["lab"] = None
        cli("down", UNNUM)
    for name in list(_shared_labs):
        del _shared_labs[name]
        cli("down", name)


@pytest.fixture(scope="session")
def _shared_labs():
    """The labs of `shared` fixtures that are up, by name; down at the session's end."""
    held: dict[str, Lab] = {}
    yield held
    for name in held:
        cli("down", name, check=False)


def shared(request, held: dict[str, Lab], topology: str, name: str):
    """A lab for every module that uses the fixture calling this: up on first use, down
    after the last such module (in the session's order), so later modules run without it."""
    if name not in held:
        lab_ = Lab(topology, name)
        try:
            lab_.up()
        except BaseException:
            cli("down", name, check=False)
            raise
        held[name] = lab_
    yield held[name]
    if name in held and not _used_later(request, request.fixturename):
        del held[name]
        cli("down", name)


def _used_later(request, fixture: str) -> bool:
    """Whether a test after this module's last one (in the session's order) uses `fixture`."""
    items = request.session.items
    here = [i for i, item in enumerate(items) if item.module is request.module]
    return any(fixture in item.fixturenames for item in items[max(here, default=-1) + 1:])


@pytest.fixture(scope="module")
def clos_cc(_shared_labs, request):
    """clos-2x4-cc (shaped at 100 Mbit/s, D = 4000), shared by the modules that run
    experiments, replays and diagnose on it and leave it as they found it (faults healed;
    an experiment's actions restore every knob they touched, runner.Timeline.restore):
    test_diagnose, test_experiments, test_gray, test_l2_demos (the `l3` fabric of its
    shaped compare runs) and test_replay. Every result those tests check is measured over
    their own run. test_telemetry has its own: it checks counters accumulated since its
    lab came up."""
    yield from shared(request, _shared_labs, "topologies/clos-2x4-cc.yaml", SHAPED)


@pytest.fixture(scope="module")
def rail_4x8(_shared_labs, request):
    """rail-4x8 (unshaped), shared by test_fabric_model and test_kv_serving: each measures
    its rails' bytes as a difference over its own transfer."""
    yield from shared(request, _shared_labs, "topologies/rail-4x8.yaml", f"{PREFIX}rail")


@pytest.fixture(scope="module")
def clos_numbered():
    yield from make_lab("topologies/clos-2x4-numbered.yaml", f"{PREFIX}num")


def poll(predicate, timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    """Poll until predicate() is truthy; fail saying what was expected and last seen."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def wait_for_line(proc: subprocess.Popen, text: str, timeout: float) -> str:
    """Read proc's stderr until a line holds `text`; fail saying what it said instead."""
    deadline, seen = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
        if ready:
            line = proc.stderr.readline()
            seen += line
            if text in line:
                return line
            if not line:
                break
    raise AssertionError(f"no {text!r} from {proc.args} within {timeout} s; it said {seen!r}")


def engine_identity(lab_: Lab, host: str) -> tuple[int, int]:
    """(PID, start time in clock ticks after boot) of the engine serving `host`: a crashed
    engine that a later `transfer` silently restarted has another (PIDs may be reused; the
    pair is not)."""
    from emulator.engine import client
    from emulator.engine.jsonlines import Channel

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(client.sock_path(lab_.plan, lab_.plan.node(host))))
    with Channel(sock) as ch:
        ch.send({"cmd": "ping"})
        pid = int(ch.recv()["pid"])
    stat = Path(f"/proc/{pid}/stat").read_text()
    return pid, int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime
