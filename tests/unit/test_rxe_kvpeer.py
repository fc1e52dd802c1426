"""kvpeer's pure pieces (no pyverbs here): the UDP source port it reports, the ACK timeout
exponent, the IPv4-mapped GID, and rxe's device counters mapped onto the engine's keys."""

from __future__ import annotations

from emulator.engine.job import SUM_KEYS, Job, Op
from emulator.roce.headers import udp_source_port
from emulator.rxe.kvpeer import (
    counter_delta,
    data_packets,
    engine_counters,
    ib_timeout,
    mapped_gid,
)


def test_rxe_sport_as_captured():
    # a 6.1 guest's QP 0x1f to engine QP 3492 sent from 59098 (tcpdump on the host's eth0):
    # kvpeer reports the engine's own udp_source_port, the formula both share with rxe
    assert udp_source_port(31, 3492) == 59098
    assert all(0xC000 <= udp_source_port(q, 0x100 + q) <= 0xFFFF for q in range(17, 5000, 7))


def test_ib_timeout():
    assert ib_timeout(0) == 14  # perftest's default: 67 ms
    assert 4.096e-6 * (1 << ib_timeout(0.01)) >= 0.01 > 4.096e-6 * (1 << (ib_timeout(0.01) - 1))
    assert ib_timeout(1e9) == 31


def test_mapped_gid():
    assert mapped_gid("10.2.2.1") == "0000:0000:0000:0000:0000:ffff:0a02:0201"


def test_engine_counters_by_role():
    write = Job(Op.WRITE, size=3 << 20)
    assert data_packets(write) == 768
    before = {"sent_pkts": 100, "completer_retry_err": 1, "rcvd_seq_err": 1}
    after = {"sent_pkts": 100 + 800, "completer_retry_err": 5, "rcvd_seq_err": 3}
    delta = counter_delta(before, after)
    c = engine_counters(delta, write, initiator=True)  # WRITE requester: sends the data
    assert set(c) == set(SUM_KEYS)
    assert (c["retransmitted_packets"], c["naks_rx"], c["timeouts"], c["packets_sent"]) == (32, 2, 2, 800)
    # WRITE responder sends ACKs only; READ requester one request per 1 MiB message
    assert engine_counters({"sent_pkts": 9}, write, initiator=False)["retransmitted_packets"] == 0
    read = Job(Op.READ, size=3 << 20)
    assert engine_counters({"sent_pkts": 5}, read, initiator=True)["retransmitted_packets"] == 2
    assert engine_counters({"sent_pkts": 770, "duplicate_request": 2}, read,
                           initiator=False) == {**dict.fromkeys(SUM_KEYS, 0),
                                                     "retransmitted_packets": 2, "packets_sent": 770,
                                                     "duplicates": 2}
