"""`rocelab transfer` / `rocelab kv` with an rxe host at one end: prefill1 (Linux Soft-RoCE
in a QEMU guest, kvpeer on real verbs) <-> decode2 (rocelab's engine), WRITE and READ
both ways, clean and under 1 % loss on both of prefill1's leaf uplinks; both ends'
digests must agree, and under loss both ends must show their recovery."""

from __future__ import annotations

import json

import pytest

from emulator.engine import client

from ..conftest import cli, rxe_vm
from .conftest import NAME

SIZE = 3 << 20
PACKETS = SIZE // 4096  # the data packets at the default 4096 MTU
# (src, dst, op, the rxe counter and the engine counter that move when frames are lost)
CASES = [
    ("prefill1", "decode2", "write", "completer_retry_err", "naks_tx"),  # rxe resends, engine NAKs
    ("prefill1", "decode2", "read", "duplicate_request", "retransmitted_packets"),  # engine re-READs
    ("decode2", "prefill1", "write", "out_of_seq_request", "retransmitted_packets"),  # engine resends
    ("decode2", "prefill1", "read", "completer_retry_err", "duplicates"),  # rxe re-READs
]
IDS = [f"{op}-{src}-{dst}" for src, dst, op, *_ in CASES]


def transfer(src: str, dst: str, op: str) -> dict:
    res = cli("transfer", NAME, "--src", src, "--dst", dst, "--size", str(SIZE), "--op", op,
              "--json")
    return json.loads(res.stdout)


def check_integrity(r: dict, src: str, dst: str, op: str) -> None:
    assert r["integrity_ok"], r
    assert r["digest"] == r["peer_digest"]  # both ends hashed their side of every segment
    assert (r["op"], r["src"], r["dst"], r["bytes"]) == (op, src, dst, SIZE)
    assert r["goodput_gbps"] > 0.01 and r["qps"][0]["spine"] in ("spine1", "spine2")


@pytest.mark.parametrize(("src", "dst", "op", "_rxe_key", "_engine_key"), CASES, ids=IDS)
def test_transfer_clean(lab, src, dst, op, _rxe_key, _engine_key):
    r = transfer(src, dst, op)
    check_integrity(r, src, dst, op)
    rxe = r["rxe"]["prefill1"]
    # the rxe end posts when it holds the source of a WRITE or the destination of a READ
    assert rxe["role"] == ("initiator" if (src == "prefill1") == (op == "write") else "responder")
    moved = rxe["counters"]["sent_pkts" if src == "prefill1" else "rcvd_pkts"]
    assert moved >= PACKETS  # the data went through rxe0, not around it
    assert r["retransmitted_packets"] == 0


def test_kv_handoff_rxe_to_engine(lab):
    res = cli("kv", NAME, "--pairs", "prefill1:decode2", "--tokens", "32", "--op", "read", "--json")
    agg = json.loads(res.stdout)["aggregate"]
    assert agg["transfers"] == 1 and agg["integrity_ok"] and agg["bytes"] == 32 * 131072


def engine_retired(lab_, host: str) -> dict:
    """The engine's counters over every QP it has retired (each transfer's, at its end);
    started if no transfer has yet (this test may run first)."""
    node = lab_.plan.node(host)
    client.ensure_engines(lab_.plan, [node])
    return client.stats(lab_.plan, node)["retired"]


def test_transfers_under_loss(lab):
    """1 % loss each way on leaf1-spine1 and leaf1-spine2: every frame between prefill1
    and decode2 crosses one of them, whichever spine its flow hashes onto."""
    for spine in ("spine1", "spine2"):
        cli("fail", NAME, "link", "leaf1", spine, "--loss", "1%")
    vm = rxe_vm(lab, "prefill1")
    try:
        for src, dst, op, rxe_key, engine_key in CASES:
            rxe0, eng0 = vm.counters(), engine_retired(lab, "decode2")
            r = transfer(src, dst, op)
            rxe1, eng1 = vm.counters(), engine_retired(lab, "decode2")
            check_integrity(r, src, dst, op)
            seen = f"{op} {src}->{dst}: rxe {r['rxe']}, result {r}"
            assert rxe1.get(rxe_key, 0) > rxe0.get(rxe_key, 0), seen
            assert eng1.get(engine_key, 0) > eng0.get(engine_key, 0), seen
            assert r["retransmitted_packets"] > 0, seen
    finally:
        cli("heal", NAME, "--all", check=False)
