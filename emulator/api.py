"""The public Python API: a lab as an object, for tests, notebooks and CI scripts.

    from emulator import Lab

    with Lab.up("topologies/clos-2x4.yaml", name="ci-fabric") as lab:
        assert lab.status()["healthy"]
        lab.fail_node("spine1")                      # waits until routing went around it
        assert all(lab.ecmp(leaf, "decode1") <= 1 for leaf in lab.leaves)
        res = lab.transfer("prefill1", "decode1", size="64MiB", qps=4)
        assert res["integrity_ok"]
        lab.heal()                                   # every fault; waits until whole

A topology is a file or the same content as a dict. Everything returns plain
data (dicts documented in docs/api.md, `validate.Check` data classes); errors
are `emulator.errors.RocelabError` subclasses. `Lab.up` always tears the lab
down when the `with` block ends, also on an exception or Ctrl-C.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import converge, faults, frr, lab, state, status, workload
from .engine.job import TransferResult
from .errors import LabNotFoundError, RocelabError
from .faults import FaultEvent, HealEvent
from .names import check_lab
from .paths import ENV_TAG
from .plan import Kind, Node, Plan
from .spec import Topology
from .units import parse_size, speed_or_zero
from .validate import Check, validate_lab

Progress = lab.Progress
DEFAULT_SETTLE_S = 30.0


class Lab:
    """A running lab: its name, its plan (`lab.plan`) and what can be done to it."""

    def __init__(self, name: str):
        self.name = check_lab(name, "name")  # before any path or namespace is built from it
        self.plan: Plan = state.lab_plan(name)
        self.topology: Topology = state.lab_topology(name)

    # -- lifecycle ----------------------------------------------------------

    @classmethod
    @contextmanager
    def up(cls, topology: str | Path | Mapping[str, Any], name: str | None = None, *,
           timeout_s: float = lab.DEFAULT_TIMEOUT_S, keep: bool = False,
           progress: Progress | None = None, templates: str | Path | None = None,
           metrics: str | None = None, expose_metrics: bool = False) -> Iterator[Lab]:
        """Bring a lab up (converged) for the `with` block; down afterwards unless `keep`.
        `templates`: a directory of FRR templates before rocelab's (`up --templates`);
        `metrics`: ADDRESS:PORT to serve its Prometheus /metrics on (`up --metrics`; a
        non-loopback address only with `expose_metrics`, as `--expose-metrics`)."""
        if name is not None:
            check_lab(name, "name")
        result = lab.up(topology, name=name, timeout_s=timeout_s,
                        progress=progress or (lambda _: None), templates=templates,
                        metrics=metrics, expose_metrics=expose_metrics)
        try:
            yield cls(result.plan.lab)
        finally:
            if not keep:
                lab.down(result.plan.lab)

    @classmethod
    def attach(cls, name: str) -> Lab:
        """A lab that is already running (brought up by `rocelab up` or another process).
        BadNameError if `name` is not a lab name (names.py): "" is not "the only lab"."""
        return cls(name)

    def down(self) -> lab.DownResult:
        return lab.down(self.name)

    # -- looking --------------------------------------------------------------

    @property
    def routers(self) -> list[str]:
        return [n.name for n in self.plan.routers]

    @property
    def leaves(self) -> list[str]:
        return [n.name for n in self.plan.of_kind(Kind.LEAF)]

    @property
    def spines(self) -> list[str]:
        return [n.name for n in self.plan.of_kind(Kind.SPINE)]

    @property
    def hosts(self) -> list[str]:
        return [n.name for n in self.plan.hosts]

    def node(self, name: str) -> Node:
        try:
            return self.plan.node(name)
        except KeyError:
            raise LabNotFoundError(f"no node {name!r} in lab {self.name}; nodes: "
                                   f"{', '.join(n.name for n in self.plan.nodes)}") from None

    def status(self) -> dict[str, Any]:
        """What `rocelab status --json` prints: converged, healthy, routers, faults, ..."""
        return status.lab_status(self.plan)

    def wait(self, until: str = "converged", timeout_s: float = DEFAULT_SETTLE_S) -> dict[str, Any]:
        """Until the lab is `converged` or `healthy`; ConvergeTimeout if not in time."""
        return status.wait_until(self.plan, until, timeout_s)

    def validate(self, checks: Sequence[str] | None = None) -> list[Check]:
        """`rocelab validate`'s checks (all by default) and the topology's `validate:` block."""
        return validate_lab(self.plan, self.topology, checks)

    def ecmp(self, node: str, to: str) -> int:
        """Next hops `node`'s kernel FIB has toward host `to`'s /31 (0: no route)."""
        prefix = self.plan.host_prefix(self.node(to))
        return converge.route_widths(self.node(node)).get(prefix, 0)

    def vtysh(self, node: str, command: str, json: bool = False) -> Any:
        """A command on the lab's FRR on `node` (never the host's); parsed if `json`."""
        if not self.node(node).is_router:
            raise RocelabError(f"{node} is a host; routers: {', '.join(self.routers)}")
        if json:
            return frr.vtysh_json(self.name, node, command)
        return frr.vtysh(self.name, node, command)

    def exec(self, node: str, argv: Sequence[str], check: bool = False,
             timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run argv inside `node`'s namespace (as `ip netns exec` does); output captured."""
        env = dict(os.environ) | {ENV_TAG: self.name}  # tagged: `down` reaps what is left
        done = subprocess.run(["ip", "netns", "exec", self.node(node).netns, *argv], env=env,
                              capture_output=True, text=True, timeout=timeout_s)
        if check and done.returncode != 0:
            raise RocelabError(f"{' '.join(argv)} on {node} exited {done.returncode}: "
                               f"{(done.stderr or done.stdout).strip()[-200:]}")
        return done

    # -- acting ------------------------------------------------------------

    def fail_link(self, a: str, b: str, silent: bool = False, wait: bool = True,
                  timeout_s: float = DEFAULT_SETTLE_S) -> FaultEvent:
        """Fail the link a-b (carrier loss, or `silent`: every frame dropped, carrier up);
        with `wait`, return once routing went around it (event["convergence"])."""
        return self._fail(faults.link_fault(self.plan, a, b, silent), wait, timeout_s)

    def fail_node(self, node: str, silent: bool = False, wait: bool = True,
                  timeout_s: float = DEFAULT_SETTLE_S) -> FaultEvent:
        """Fail every link of router `node` at once."""
        return self._fail(faults.node_fault(self.plan, node, silent), wait, timeout_s)

    def _fail(self, fault: faults.Fault, wait: bool, timeout_s: float) -> FaultEvent:
        if wait:
            return faults.fail_settled(self.plan, fault, timeout_s)
        return faults.fail(self.plan, fault)

    def heal(self, a: str | None = None, b: str | None = None, *, node: str | None = None,
             wait: bool = True, timeout_s: float = DEFAULT_SETTLE_S) -> HealEvent:
        """Heal the link a-b, or router `node`, or (no arguments) every fault."""
        target = (faults.link_fault(self.plan, a, b) if a and b
                  else faults.node_fault(self.plan, node) if node else None)
        if (a is None) != (b is None):
            raise RocelabError("heal: give both ends of a link (a and b), or node=, or nothing")
        if wait:
            return faults.heal_settled(self.plan, target, timeout_s)
        return faults.heal(self.plan, target)

    def transfer(self, src: str, dst: str, size: str | int = "4MiB", op: str = "write",
                 qps: int = 1, rate: str | None = None, timeout_s: float = 600.0) -> TransferResult:
        """A RoCEv2 transfer (RDMA WRITE pushes src -> dst; READ: dst pulls); its result.
        `rate` is a NIC rate limit at the real link speed (e.g. "100G"). EngineError if the
        transfer fails; a completed one with differing digests has integrity_ok False."""
        from .engine.job import Job, Op

        try:
            operation = Op(op)
        except ValueError:
            raise RocelabError(f"op: must be write or read (got {op!r})") from None
        bps = speed_or_zero(rate) if rate else 0
        if rate and not bps:
            raise RocelabError(f"rate: {rate!r} is not a speed like 100G or 25G")
        job = Job(operation, size=parse_size(size, "size"), qps=qps, timeout_s=timeout_s,
                  rate_bps=self.plan.dilation.wall_bps(bps) if bps else 0.0)
        s = workload.host(self.plan, src, option="src", rxe_ok=True)
        d = workload.host(self.plan, dst, option="dst", rxe_ok=True)
        workload.check_duration(self.plan, job, s, bound="timeout_s")
        return workload.run_transfer(self.plan, s, d, job, None)

    def __repr__(self) -> str:
        return (f"Lab({self.name!r}: {len(self.plan.routers)} routers, "
                f"{len(self.plan.hosts)} hosts)")
