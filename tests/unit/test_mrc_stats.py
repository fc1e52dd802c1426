"""The engine's MRC stats entries (docs/mrc.md "Engine stats"): the exact keys D's
collector and E's analysis read, live and finished-summed per flow."""

from __future__ import annotations

from emulator.engine.mrcplane import MrcPlane, entry_of
from emulator.roce.memory import MemoryTable
from emulator.roce.mrc_ev import EvSet, entropy_values
from emulator.roce.mrc_receiver import MrcReceiver
from emulator.roce.mrc_sender import MrcSender
from emulator.roce.nscc import Nscc, NsccParams

KEYS = {"conn", "flow", "src", "dst", "evs_total", "evs_by_state", "retirements", "probes_sent",
        "probes_answered", "sacks_sent", "sacks_received", "nacks_sent", "nacks_received",
        "trim_nacks_sent", "trim_nacks_received", "retransmitted_packets",
        "retransmitted_bytes", "cwnd_bytes", "paths"}
PATH_KEYS = {"ev", "plane", "state", "bytes", "packets", "retirements"}
FLOW = ("kv1", "prefill1", "decode1")


def _sender(conn: int = 0x123) -> MrcSender:
    cc = Nscc(NsccParams(4096, 1e-4, 1e-4, 1 << 20, 1 << 20))
    return MrcSender(conn, 0x456, EvSet(entropy_values(1, 8, planes=2), 2, 0.1), cc)


class _FakeEndpoint:
    def add(self, *a: object) -> None: ...
    def remove(self, conn: int) -> None: ...


def test_entry_has_exactly_the_contract_keys():
    e = entry_of(0x123, _sender(), FLOW)
    assert set(e) == KEYS and e["conn"] == "0x123" and e["evs_total"] == 16
    assert set(e["evs_by_state"]) == {"good", "assumed_bad", "denied", "unknown"}
    assert e["evs_by_state"]["unknown"] == 16 and e["cwnd_bytes"] == 1 << 20
    assert all(set(p) == PATH_KEYS for p in e["paths"]) and len(e["paths"]) == 16
    r = entry_of(0x456, MrcReceiver(0x456, 0x123, MemoryTable()), FLOW)
    assert set(r) == KEYS and r["evs_total"] == 0 and r["paths"] == []


def test_finished_connections_are_summed_per_flow():
    plane = MrcPlane(_FakeEndpoint())  # type: ignore[arg-type]
    for conn in (1, 2):
        s = _sender(conn)
        s.counters.sacks_received = 5
        plane.add(conn, s, [], [], FLOW)
    assert [e["conn"] for e in plane.stats()] == ["0x1", "0x2"]
    plane.remove(1)
    plane.remove(2)
    (done,) = plane.stats()
    assert done["conn"] == "finished" and done["flow"] == "kv1" and set(done) == KEYS
    assert done["sacks_received"] == 10 and done["evs_total"] == 32
    assert done["evs_by_state"]["unknown"] == 32 and done["paths"] == []
