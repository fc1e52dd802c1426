"""KV moved as serving stacks move it, on real engines in namespaces (issue 28).

clos-2x4: `kv --descriptor 16KiB` pulls (vLLM/NIXL) and pushes (Mooncake/LMCache) the
cache as thousands of 16 KiB RDMA ops; the bytes that land hash to what the job says
they are, and the initiating engine's stats count every op it posted. rail-4x8: `kv
--stripe` puts an equal share of a handoff on every rail (each NIC's kernel counters),
over 2 QPs per NIC.
"""

from __future__ import annotations

import json

import pytest

from emulator import state
from emulator.engine import client
from emulator.engine.job import Job, Op, digest, source_bytes

from .conftest import cli

pytestmark = pytest.mark.timeout(600)  # a lab comes up inside the first test
KV_ARGS = ("--model", "llama3-8b", "--tokens", "64", "--pairs", "prefill1:decode1")  # 8 MiB


def _flow_ops(plan, host: str) -> int:
    flows = client.stats(plan, plan.node(host))["flows"]
    return sum(f["work_requests"] for f in flows if f["flow"] == "prefill1->decode1")


@pytest.mark.parametrize("op,initiator", [("read", "decode1"), ("write", "prefill1")])
def test_descriptors_move_the_exact_bytes_as_thousands_of_ops(clos_unnumbered, op, initiator):
    plan = state.lab_plan(clos_unnumbered.name)
    cli("kv", plan.lab, *KV_ARGS, "--requests", "1", "--op", op, timeout=300)  # engines up
    before = _flow_ops(plan, initiator)
    res = json.loads(cli("kv", plan.lab, *KV_ARGS, "--requests", "2", "--concurrency", "1",
                         "--op", op, "--descriptor", "16KiB", "--json", timeout=300).stdout)
    job = Job(Op(op), kv={"model": "llama3-8b", "tokens": 64, "dtype": "fp16",
                          "tokens_per_block": 16}, descriptor=16 << 10)
    ops = 32 * 2 * 4 * 2  # layers x K/V x blocks x two 16 KiB halves of each 32 KiB block
    assert job.ops == ops == 512
    want = digest(source_bytes(job), job.segments(), "src")  # what prefill holds
    for r in res["requests"]:
        assert r["messages"] == ops and r["bytes"] == 64 * 128 * 1024
        assert r["integrity_ok"] and r["digest"] == want, r  # both ends, and the source
    assert "posted as 512 ops of <= 16384 B" in res["sizing"]
    assert _flow_ops(plan, initiator) - before == 2 * ops


def test_a_plain_kv_run_posts_one_op_per_block_copy(clos_unnumbered):
    plan = state.lab_plan(clos_unnumbered.name)
    res = json.loads(cli("kv", plan.lab, *KV_ARGS, "--requests", "1", "--json",
                         timeout=300).stdout)
    assert res["requests"][0]["messages"] == 32 * 2 * 4  # the baseline the cut doubles
    assert res["aggregate"]["integrity_ok"]


def test_stripe_puts_an_equal_share_on_every_rail(rail_4x8):
    lab = rail_4x8  # shared with test_fabric_model (conftest): bytes counted over this run
    plan = state.lab_plan(lab.name)
    cli("kv", lab.name, "--model", "llama3-8b", "--tokens", "16", "--pairs",
        "prefill1:decode1", timeout=300)  # engines up, ARP resolved
    before = {r["rail"]: r["tx_bytes"] for r in lab.status()["rails"]}
    res = json.loads(cli("kv", lab.name, "--model", "llama3-8b", "--tokens", "128",
                         "--pairs", "prefill1:decode1", "--stripe", "--json",
                         timeout=300).stdout)
    after = {r["rail"]: r["tx_bytes"] for r in lab.status()["rails"]}
    r = res["requests"][0]
    assert r["integrity_ok"] and r["bytes"] == 16 << 20
    assert len(r["qps"]) == 8  # 2 per NIC pair
    assert sorted(q["rail"] for q in r["qps"]) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert {q["local_ip"] for q in r["qps"]} == set(plan.node("prefill1").addresses)
    quarter = (16 << 20) // 4
    sent = {rail: after[rail] - before.get(rail, 0) for rail in after}
    # every rail carries its quarter of the payload, headers and ACKs on top, and what its
    # QPs resent (a busy machine makes RC go back N: CI saw 1.17-1.24 quarters per rail)
    resent = {rail: sum(q["retransmitted_packets"] for q in r["qps"] if q["rail"] == rail)
              for rail in range(4)}
    assert all(quarter < sent[rail] < 1.1 * quarter + resent[rail] * (4096 + 128)
               for rail in range(4)), (sent, resent)
