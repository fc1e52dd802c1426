"""rxe hosts: Linux Soft-RoCE's own counters, read inside each guest through its agent.

fetch: for every rxe host of the lab, the agent's `counters` reply (the guest's
/sys/class/infiniband/rxe0/ports/1/hw_counters/*, the same numbers `rdma statistic
show link rxe0/1` prints), all guests at once, each bounded by TIMEOUT_S: a guest
that is slow (TCG on a loaded machine), whose four agent ports are all taken, or
whose QEMU is gone costs at most TIMEOUT_S and shows as `rocelab_rxe_up 0`, never a
stalled scrape. parse: `rocelab_rxe_<counter>_total{lab,node}` per counter the
kernel has (names as rxe spells them), and `rocelab_rxe_up`.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any

from ...hosts import kind_of
from ...plan import Plan
from ..model import Families, Family, Kind, Source

NAME = "rxe"
TIMEOUT_S = 1.0  # per scrape, for all guests together (they are asked in parallel)
NOT_COUNTERS = {"lifespan"}  # hw_counters/lifespan: the refresh period (ms), a setting
HELP = {  # Linux 6.1 drivers/infiniband/sw/rxe/rxe_hw_counters.c
    "sent_pkts": "Packets rxe handed to the network (requests, responses, ACKs; retries too).",
    "rcvd_pkts": "Packets rxe received and accepted (ICRC and header checks passed).",
    "duplicate_request": "Requests behind the expected PSN (a retry of something done).",
    "out_of_seq_request": "Requests ahead of the expected PSN (a gap: a loss upstream).",
    "rcvd_rnr_err": "RNR NAKs received.",
    "send_rnr_err": "RNR NAKs sent (a SEND found no posted receive).",
    "rcvd_seq_err": "Sequence-error NAKs received.",
    "ack_deferred": "ACKs the responder coalesced instead of sending at once.",
    "retry_exceeded_err": "QPs that exhausted retry_cnt (transport retry error).",
    "retry_rnr_exceeded_err": "QPs that exhausted rnr_retry.",
    "completer_retry_err": "Retries the completer started (timeouts, NAKs, gaps in responses).",
    "send_err": "Packets the network stack refused to send.",
    "link_downed": "Times the port went down.",
    "rdma_sends": "RDMA WRITE/READ requests sent (RDMA operations, not packets).",
    "rdma_recvs": "RDMA WRITE/READ requests received.",
}


class Collector(Source):
    name = NAME

    def __init__(self, plan: Plan):
        super().__init__(plan)
        self.hosts = [h for h in plan.hosts if kind_of(h).collector == NAME]  # its kind's
        self._pool = ThreadPoolExecutor(max(1, min(8, len(self.hosts))), "rxe-counters")

    def applies(self) -> bool:
        return bool(self.hosts)

    def fetch(self) -> dict[str, Any]:
        from ...rxe.hosts import running

        pids = running(self.plan.lab)
        deadline = time.monotonic() + TIMEOUT_S
        futures = {h.name: self._pool.submit(self._ask, h, pids.get(h.name), deadline)
                   for h in self.hosts}
        wait_futures(futures.values(), timeout=TIMEOUT_S + 0.2)  # the requests time out first
        out: dict[str, Any] = {}
        for host, f in futures.items():
            if not f.done():
                out[host] = {"error": f"no answer within {TIMEOUT_S} s"}
            elif f.exception() is not None:
                out[host] = {"error": f"{type(f.exception()).__name__}: {f.exception()}"}
            else:
                out[host] = f.result()
        return out

    def _ask(self, host, pid: int | None, deadline: float) -> dict[str, Any]:
        from ...rxe.hosts import vm_for

        if pid is None or not os.path.exists(f"/proc/{pid}"):
            return {"error": "no guest running"}
        vm = vm_for(self.plan, host)
        with vm.channel(deadline) as ch:
            left = max(0.05, deadline - time.monotonic())
            return {"counters": dict(ch.request("counters", wait_s=left)["counters"])}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def parse(raw: dict[str, Any], plan: Plan) -> list[Family]:
        fams = Families(plan.lab)
        for host, reply in sorted(raw.items()):
            labels = fams.labels(node=host)
            counters = reply.get("counters")
            fams.add(Kind.GAUGE, "rocelab_rxe_up",
                     "1 if the rxe guest's agent answered with its counters in time.",
                     int(counters is not None), labels)
            for name, value in sorted((counters or {}).items()):
                if name in NOT_COUNTERS or not isinstance(value, int):
                    continue
                fams.add(Kind.COUNTER, f"rocelab_rxe_{name}_total",
                         HELP.get(name, f"rxe hw_counters/{name}."), value, labels)
        return fams.as_list()
