"""The sampled port (metrics.snapshot.PortSample): what the sampler makes is what
results.json has always stored under `ports`, and what diagnose reads, old files too."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from emulator.diagnose import diagnose
from emulator.diagnose.evidence import Evidence, from_results
from emulator.metrics.snapshot import SERIES_KEYS, port_from_json, port_sample

FIXTURES = Path(__file__).parent / "fixtures" / "diagnose"
# results.json's `ports` entries, key by key, as every rocelab since diagnose wrote them
STORED_KEYS = ["node", "port", "tc", "max_queued", "max_buffered", "tx_packets", "tx_bytes",
               "ce_marked", "ecn_capable", "rx_ce", "pause_tx", "pause_rx", "trim", "tx_trim",
               "dropped_trim", "series"]
STORED_SERIES = ["queued", "buffered", "ce_marked", "pause_tx", "tx_bytes", "rx_ce", "ecn_capable"]


def counters(**values: int) -> dict[str, int]:
    keys = ("queued", "buffered", "max_queued", "max_buffered", "tx_packets", "tx_bytes",
            "ecn_capable", "ce_marked", "rx_ce", "pause_tx", "pause_rx", "paused", "trim",
            "tx_trim", "dropped_trim")
    return dict.fromkeys(keys, 0) | values


def test_the_sampler_s_sample_keeps_the_stored_keys_in_order():
    series = {k: [(0.1, 1)] for k in SERIES_KEYS}
    p = port_sample("leaf1", "spine1", 3, counters(tx_bytes=100, pause_tx=2),
                    counters(tx_bytes=1100, pause_tx=5, max_queued=9000, max_buffered=7),
                    series)
    assert list(p) == STORED_KEYS and list(p["series"]) == STORED_SERIES == list(SERIES_KEYS)
    assert (p["tx_bytes"], p["pause_tx"], p["max_queued"], p["max_buffered"]) == (1000, 3, 9000, 7)


def test_a_recorded_port_reads_back_byte_for_byte():
    """The fixtures keep every series of the TC 3 ports (compact.py trims the others)."""
    raw = json.loads(gzip.decompress((FIXTURES / "pause-storm.json.gz").read_bytes()))
    raw["ports"] = [p for p in raw["ports"] if p["tc"] == 3]
    ev = Evidence.from_json(json.loads(json.dumps(raw)))
    want = [{k: p.get(k, 0) for k in STORED_KEYS} for p in raw["ports"]]  # + trims (0: recorded before)
    assert json.dumps(ev.as_json()["ports"]) == json.dumps(want)


def test_a_port_from_before_ecn_capable_was_sampled_still_loads():
    old = {"node": "leaf3", "port": "decode1", "tc": 3, "max_queued": 5, "tx_bytes": 10,
           "pause_tx": 4, "series": {"queued": [[0.1, 5]], "pause_tx": [[0.1, 4]]}}
    p = port_from_json(old)
    assert list(p) == STORED_KEYS and list(p["series"]) == STORED_SERIES
    assert p["ecn_capable"] == 0 and p["series"]["ecn_capable"] == []
    assert p["pause_tx"] == 4 and p["series"]["queued"] == [[0.1, 5]]


def test_diagnose_reads_a_results_file_whose_ports_lack_newer_counters():
    raw = json.loads(gzip.decompress((FIXTURES / "pause-storm.json.gz").read_bytes()))
    for p in raw["ports"]:
        del p["ecn_capable"], p["max_buffered"]
        p["series"].pop("ecn_capable", None)
    results = {"lab": raw["lab"], "dilation": raw["dilation"], "link_rate_bps": raw["rate_bps"],
               "ports": raw["ports"], "flows": raw["flows"], "pfc": {"paused_s": raw["paused_s"]},
               "evidence": {"window_s": raw["window_s"], "thresholds": raw["thresholds"],
                            "kinds": raw["kinds"], "peers": raw["peers"],
                            "metrics": raw["metrics"]}}
    found = diagnose(from_results(results, "old.json"))
    assert found[0].kind == "pause-storm"
