"""The pure parts of the engine benchmark (emulator/bench/engine.py): reading
iperf3's JSON reports and summarising runs against the target."""

from __future__ import annotations

import json

from emulator.bench.engine import TARGET_RATIO, _summary, iperf3_figures

# Trimmed from a real `iperf3 -s -1 --json` / `iperf3 -c -u -b 0 -l 1024 --json` pair
# (iperf 3.12) on the benchmark's veth: the server's "sum" counts 0 bytes for UDP,
# the received figure is only in "sum_received".
SERVER = {"end": {
    "sum": {"bytes": 0, "bits_per_second": 0, "packets": 228850, "lost_packets": 52084,
            "lost_percent": 22.759012453572208, "sender": False},
    "sum_sent": {"bytes": 0, "bits_per_second": 0, "packets": 0, "sender": True},
    "sum_received": {"bytes": 181008384, "bits_per_second": 723821094.5087618,
                     "packets": 228850, "lost_packets": 52084,
                     "lost_percent": 22.759012453572208, "sender": False}}}
CLIENT = {"end": {
    "sum": {"bytes": 234342400, "bits_per_second": 937126884.1370085, "sender": True},
    "sum_sent": {"bytes": 234342400, "bits_per_second": 937126884.1370085,
                 "packets": 228850, "sender": True},
    "sum_received": {"bytes": 181008384, "bits_per_second": 723821094.5087618}}}
TIMED = {"seconds": 3.0}  # what the real reports carry besides; the CPU figures need it
CPU = {"host_total": 40.0, "host_user": 10.0, "host_system": 30.0,
       "remote_total": 25.0, "remote_user": 5.0, "remote_system": 20.0}


def test_iperf3_baseline_is_the_servers_received_rate() -> None:
    got = iperf3_figures(json.dumps(SERVER), json.dumps(CLIENT))
    assert got == {"received_gbit_s": 0.724, "sent_gbit_s": 0.937, "packets": 228850,
                   "lost_packets": 52084, "lost_percent": 22.76}


def test_iperf3_cpu_per_packet_per_side() -> None:
    """--json's cpu_utilization_percent (host: the client, remote: the server) over the
    test's seconds, per packet each side handled: sent, and received (not lost)."""
    server = json.loads(json.dumps(SERVER))
    server["end"]["sum_received"] |= TIMED
    client = json.loads(json.dumps(CLIENT))
    client["end"]["sum_sent"] |= TIMED
    client["end"]["cpu_utilization_percent"] = CPU
    got = iperf3_figures(json.dumps(server), json.dumps(client))["cpu_us_per_packet"]
    assert got == {"sender": round(0.4 * 3.0 / 228850 * 1e6, 2),
                   "receiver": round(0.25 * 3.0 / (228850 - 52084) * 1e6, 2)}


def _run(gbit: float, ok: bool = True) -> dict:
    return {"goodput_gbit_s": gbit, "integrity_ok": ok, "retransmitted_packets": 1,
            "cpu_us_per_packet": {"sender": 9.0, "receiver": gbit}, "data_path": "compiled"}


def test_summary_takes_medians_and_needs_integrity_for_the_target() -> None:
    s = _summary([_run(0.95), _run(0.3), _run(0.9)], iperf_gbit_s=1.0,
                 iperf_cpu={"sender": 4.5, "receiver": 2.0})
    assert (s["goodput_gbit_s"], s["ratio_to_iperf3"], s["meets_target"]) == (0.9, 0.9, True)
    assert s["cpu_us_per_packet"] == {"sender": 9.0, "receiver": 0.9}
    assert s["cpu_vs_iperf3"] == {"sender": 2.0, "receiver": 0.45}
    assert s["retransmitted_packets"] == 3 and TARGET_RATIO == 0.9
    assert s["data_path"] == "compiled"
    assert not _summary([_run(0.89)], 1.0)["meets_target"]
    assert not _summary([_run(0.95), _run(0.95, ok=False)], 1.0)["meets_target"]
    assert _summary([_run(0.9)], 0.0)["ratio_to_iperf3"] is None
    assert _summary([_run(0.9)], 1.0)["cpu_vs_iperf3"] == {}  # no iperf3 CPU figures
