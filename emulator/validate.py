"""`rocelab validate`: named checks on a running lab, or on a topology file offline.

Live checks (each passes or fails with what it saw):
    fib         every router's kernel FIB holds the ECMP widths the plan and the
                active faults require (faults.expected_fib)
    bgp         every session on a link that is not cut is Established
    reach       every host reaches every other host that no fault isolates (ICMP echo)
    mtu         a full-MTU, don't-fragment ping crosses the fabric between leaves
    roce        a 1 MiB RDMA WRITE from a prefill to a decode host arrives intact
    congestion  (a shaped lab) every port has its HTB/TBF queues and the BPF
                programs, and the congestion controller runs
and one check per named expectation of the topology's `validate:` block
(`expect:<name>`). Offline (`validate FILE`, no root): schema, plan, render.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from pyroute2 import IPRoute

from . import converge, faults, netns, procs
from .errors import RocelabError
from .faults.model import link_alive
from .plan import Node, Plan
from .spec import Expectation, Topology
from .status import active_after, expected_sessions
from .units import parse_size, parse_speed

LIVE = ("fib", "bgp", "reach", "mtu", "roce", "congestion")
OFFLINE = ("schema", "plan", "render")
ROCE_BYTES = 1 << 20


@dataclass
class Check:
    name: str
    ok: bool
    seen: str  # what it saw, one line
    problems: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    skipped: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


Probe = Callable[[], tuple[bool, str, list[str]]]


def _run(name: str, probe: Probe) -> Check:
    t0 = time.monotonic()
    try:
        ok, seen, problems = probe()
    except RocelabError as e:
        ok, seen, problems = False, "failed to run", [str(e)]
    return Check(name, ok, seen, problems, round(time.monotonic() - t0, 3))


# -- live checks ------------------------------------------------------------

class Live:
    """The state every live check reads once: the plan, the active faults and what they cut."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.faults, self.after = active_after(plan)
        up = link_alive(self.after)
        self.hosts = [h for h in plan.hosts  # not isolated by a fault (every leaf of it cut off)
                      if any(up(h.name, leaf) for leaf in h.leaves)]

    def fib(self) -> tuple[bool, str, list[str]]:
        have = converge.fib_widths(self.plan)
        if converge.user_config(self.plan):  # the user's policy sets the widths, not the plan
            bad = converge.unrouted(have)
            return not bad, f"{len(have) - len(bad)}/{len(have)} routers route their host " \
                            "prefixes (widths: your FRR configuration's)", bad
        expected = faults.expected_fib(self.plan, self.after)
        bad = [f"{r}: {p} has {have.get(r, {}).get(p)} next hops (want {w})"
               for r, want in expected.items() for p, w in want.items()
               if have.get(r, {}).get(p) != w]
        return not bad, f"{len(expected) - len({b.split(':')[0] for b in bad})}/{len(expected)} " \
                        f"routers as expected ({len(self.faults)} active faults)", bad

    def bgp(self) -> tuple[bool, str, list[str]]:
        sessions = converge.read_sessions(self.plan)
        shut = converge.admin_shut(self.plan, sessions)  # the user's `neighbor ... shutdown`
        rows = [(node.name, sum(1 for p in peers.values() if p["state"] == "Established")
                 if isinstance(peers, dict) else 0, expected_sessions(node, self.after, shut))
                for node in self.plan.frr_nodes
                for peers in [sessions.get(node.name, {})]]
        bad = [f"{n} has {up}/{want} sessions Established" for n, up, want in rows if up < want]
        return not bad, f"{sum(r[1] for r in rows)} sessions Established " \
                        f"(want {sum(r[2] for r in rows)})", bad

    def reach(self) -> tuple[bool, str, list[str]]:
        missing = converge.check_reach_hosts(self.hosts)
        pairs = len(self.hosts) * (len(self.hosts) - 1)
        return not missing, f"{pairs - len(missing)}/{pairs} host pairs answer", \
            [f"{s} cannot reach {d}" for s, d in missing]

    def mtu(self) -> tuple[bool, str, list[str]]:
        first: dict[str | None, Node] = {}
        for h in self.hosts:
            first.setdefault(h.leaf, h)
        ends = list(first.values())
        size = self.plan.mtu - 28  # IPv4 + ICMP headers
        bad = [f"{a.name} -> {b.name}: no reply to {size + 28}-byte don't-fragment ping"
               for a in ends for b in ends if a is not b and not _ping(a, b, size)]
        pairs = len(ends) * (len(ends) - 1)
        return not bad, f"{pairs - len(bad)}/{pairs} leaf pairs pass {self.plan.mtu}-byte packets", bad

    def roce(self) -> tuple[bool, str, list[str]]:
        src, dst = _pair(self.hosts)
        res = _transfer(self.plan, src, dst, ROCE_BYTES, "write", 1)
        seen = (f"{ROCE_BYTES >> 20} MiB {src.name} -> {dst.name} at "
                f"{res['goodput_gbps'] * 1e3:.1f} Mbit/s, integrity "
                f"{'ok' if res['integrity_ok'] else 'FAILED'}")
        return bool(res["integrity_ok"]), seen, [] if res["integrity_ok"] else [seen]

    def congestion(self) -> tuple[bool, str, list[str]]:
        bad = [p for node in self.plan.nodes for p in _port_qos_problems(node)]
        if not _controller_running(self.plan.lab):
            bad.insert(0, "the congestion controller is not running")
        ports = sum(len(n.interfaces) for n in self.plan.nodes)
        return not bad, f"{ports - len(bad)}/{ports} ports shaped with ECN/PFC programs", bad


def _pair(hosts: list[Node]) -> tuple[Node, Node]:
    """A prefill host and a decode host on another leaf (any two hosts otherwise)."""
    for src in hosts:
        for dst in hosts:
            if src.role == "prefill" and dst.role == "decode" \
                    and src.leaf != dst.leaf:
                return src, dst
    if len(hosts) < 2:
        raise RocelabError("needs two hosts that no fault isolates")
    return hosts[0], hosts[-1]


def _ping(src: Node, dst: Node, size: int, count: int = 1) -> bool:
    argv = ["ping", "-n", "-q", "-M", "do", "-s", str(size), "-c", str(count), "-W", "1",
            dst.address or ""]
    with netns.entered(src.netns):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    return done.returncode == 0


def _transfer(plan: Plan, src: Node, dst: Node, size: int, op: str, qps: int) -> dict[str, Any]:
    from .engine import client
    from .engine.job import Job, Op

    client.ensure_engines(plan, [src, dst])
    return dict(client.transfer(plan, src, dst, Job(Op(op), size=size, qps=qps)))


def _port_qos_problems(node: Node) -> list[str]:
    with netns.entered(node.netns), IPRoute() as ipr:
        out = []
        for port in node.interfaces:
            index = ipr.link_lookup(ifname=port.name)
            kinds = {q.get_attr("TCA_KIND") for q in ipr.get_qdiscs(index[0])} if index else set()
            missing = {"htb", "tbf", "clsact"} - kinds
            if missing:
                out.append(f"{node.name}:{port.name} lacks {', '.join(sorted(missing))}")
    return out


def _controller_running(lab: str) -> bool:
    for pid, tag in procs.tagged_processes().items():
        if tag != lab:
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"emulator.congestion.controller" in cmdline:
            return True
    return False


# -- the topology's own expectations -----------------------------------------

def expectation(plan: Plan, live: Live, exp: Expectation) -> tuple[bool, str, list[str]]:
    kind, e = exp.kind, getattr(exp, exp.kind)
    if kind == "ecmp":
        target = plan.host_prefix(plan.node(e.to))
        width = converge.route_widths(plan.node(e.node)).get(target, 0)
        seen = f"{e.node} has {width} next hops toward {e.to} ({target})"
        return width == e.width, seen, [] if width == e.width else [f"{seen}; want {e.width}"]
    if kind == "session":
        node = plan.node(e.node)
        port = next(i for i in node.interfaces if i.peer == e.peer)
        peers = converge.bgp_sessions(plan, node)
        peer_ip = next((i.address.split("/")[0] for i in plan.node(e.peer).interfaces
                        if i.peer == e.node and i.address), None)
        got = next((str(p["state"]) for k, p in peers.items() if k in (port.name, peer_ip)),
                   "absent")
        ok = (got == "Established") == (e.state == "established")
        seen = f"{e.node} -> {e.peer}: {got}"
        return ok, seen, [] if ok else [f"{seen}; want {e.state}"]
    if kind == "reach":
        a, b = plan.node(e.src), plan.node(e.dst)
        answered = not converge.check_reach_hosts([a, b], pairs=[(a.name, b.name)])
        seen = f"{e.src} -> {e.dst}: {'reply' if answered else 'no reply'}"
        return answered == e.reachable, seen, [] if answered == e.reachable else [seen]
    if kind == "route":
        present = e.prefix in converge.route_widths(plan.node(e.node))
        seen = f"{e.node}: {e.prefix} {'present' if present else 'absent'}"
        return present == e.present, seen, [] if present == e.present else [seen]
    res = _transfer(plan, plan.node(e.src), plan.node(e.dst), parse_size(e.size, "size"), e.op, e.qps)
    real_gbps = plan.dilation.real_bps(res["goodput_gbps"])
    seen = f"{e.op} {e.src} -> {e.dst}: {real_gbps:g} Gbit/s" + (
        " real-equivalent" if plan.congestion else "") + \
        f", integrity {'ok' if res['integrity_ok'] else 'FAILED'}"
    want = parse_speed(e.min_goodput) / 1e9 if e.min_goodput else 0.0
    ok = bool(res["integrity_ok"]) and real_gbps >= want
    return ok, seen, [] if ok else [f"{seen}; want >= {e.min_goodput}"]


# -- entry points --------------------------------------------------------------

def validate_lab(plan: Plan, topo: Topology, checks: Iterable[str] | None = None) -> list[Check]:
    """Run the named live checks (all by default) and every expectation of `topo`."""
    wanted = list(checks) if checks is not None else list(LIVE) + ["expect"]
    unknown = [c for c in wanted if c not in (*LIVE, "expect")]
    if unknown:
        raise RocelabError(f"--check: no check {unknown[0]!r}; checks: {', '.join(LIVE)}, expect")
    live = Live(plan)
    out = []
    for name in wanted:
        if name == "expect":
            out += [_run(f"expect:{n}", lambda e=e: expectation(plan, live, e))  # type: ignore[misc]
                    for n, e in topo.validate_.items()]
        elif name == "congestion" and plan.congestion is None:
            out.append(Check(name, True, "no congestion plane in this topology", skipped=True))
        else:
            out.append(_run(name, getattr(live, name)))
    return out


def validate_file(path: str | Path) -> list[Check]:
    """Offline: the file's schema, its plan and every rendered config; no root, no kernel."""
    from .lab import load_topology
    from .spec import load

    out = [_run("schema", lambda: (True, f"{load(path).name}: valid", []))]
    if not out[0].ok:
        return out
    t0 = time.monotonic()
    try:
        topo, plan, rendered = load_topology(path)
    except RocelabError as e:
        return out + [Check("plan", False, "does not plan", [str(e)], round(time.monotonic() - t0, 3))]
    out.append(Check("plan", True, f"{len(plan.routers)} routers, {len(plan.hosts)} hosts, "
                     f"{len(plan.links)} links, {len(topo.validate_)} expectations",
                     duration_s=round(time.monotonic() - t0, 3)))
    files = sum(len(f) for f in rendered.files.values())
    out.append(Check("render", True, f"{files} configs for {len(plan.routers)} routers"))
    return out


def junit(checks: list[Check], suite: str) -> str:
    """JUnit XML, one testcase per check (CI systems read it)."""
    root = ET.Element("testsuite", name=suite, tests=str(len(checks)),
                      failures=str(sum(not c.ok for c in checks)),
                      skipped=str(sum(c.skipped for c in checks)),
                      time=f"{sum(c.duration_s for c in checks):.3f}")
    for c in checks:
        case = ET.SubElement(root, "testcase", classname=f"rocelab.{suite}", name=c.name,
                             time=f"{c.duration_s:.3f}")
        if c.skipped:
            ET.SubElement(case, "skipped", message=c.seen)
        elif not c.ok:
            ET.SubElement(case, "failure", message=c.seen).text = "\n".join(c.problems)
        ET.SubElement(case, "system-out").text = c.seen
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
