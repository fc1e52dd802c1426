"""The engine benchmark's baseline: iperf3 -u on the same veth, in the same run.

`run_iperf3` runs one UDP test (`-b 0`, one payload size) between the
benchmark's two namespaces and returns what its server received (the
baseline the engine is compared with), what its client sent, and each
side's CPU per packet from `--json`'s cpu_utilization_percent.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from typing import Any

from ..errors import EngineError

IPERF_S = 3
IPERF_PORT = 5201


def per_packet(seconds: float, packets: int) -> float | None:
    """Microseconds per packet, or None for no packets."""
    return round(seconds / packets * 1e6, 2) if packets else None


def run_iperf3(payload: int, client_ns: str, server_ns: str, server_ip: str,
               cpus: dict[str, int | None]) -> dict[str, Any]:
    """iperf3 -u -b 0 from `client_ns` to a one-off server on `server_ip` in
    `server_ns`, each on its CPU from `cpus` (by namespace); the figures of both."""
    server = subprocess.Popen(
        ["ip", "netns", "exec", server_ns, "iperf3", "-s", "-1", "-B", server_ip, "-p",
         str(IPERF_PORT), *_affinity(cpus[server_ns]), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_listening(server.pid, IPERF_PORT, 5.0)
        client = subprocess.run(
            ["ip", "netns", "exec", client_ns, "iperf3", "-c", server_ip, "-p", str(IPERF_PORT),
             "-u", "-b", "0", "-l", str(payload), "-t", str(IPERF_S), *_affinity(cpus[client_ns]),
             "--json"],
            capture_output=True, text=True, timeout=IPERF_S + 15)
        out, err = server.communicate(timeout=10)
    finally:
        if server.poll() is None:
            server.kill()  # by its PID
            server.wait()
    if server.returncode != 0 or client.returncode != 0:
        raise EngineError(f"iperf3 failed: server {err.strip()!r} client {client.stdout[-300:]!r}")
    return iperf3_figures(out, client.stdout)


def _affinity(cpu: int | None) -> list[str]:
    return [] if cpu is None else ["-A", str(cpu)]


def iperf3_figures(server_json: str, client_json: str) -> dict[str, Any]:
    """The rates of one UDP test from iperf3's --json reports: what the server
    received (its `sum_received`: the baseline) and what the client sent."""
    recv = json.loads(server_json)["end"]["sum_received"]
    sent = json.loads(client_json)["end"]["sum_sent"]
    out = {"received_gbit_s": round(recv["bits_per_second"] / 1e9, 3),
           "sent_gbit_s": round(sent["bits_per_second"] / 1e9, 3),
           "packets": recv["packets"], "lost_packets": recv["lost_packets"],
           "lost_percent": round(recv["lost_percent"], 2)}
    cpu = json.loads(client_json)["end"].get("cpu_utilization_percent")
    if cpu is not None:  # host: the client (sender); remote: the server (receiver)
        got = recv["packets"] - recv["lost_packets"]
        out["cpu_us_per_packet"] = {
            "sender": per_packet(cpu["host_total"] / 100 * sent["seconds"], sent["packets"]),
            "receiver": per_packet(cpu["remote_total"] / 100 * recv["seconds"], got)}
    return out


def _wait_listening(pid: int, port: int, timeout: float) -> None:
    """Poll the process's own /proc/PID/net/tcp (its namespace) for a listener."""
    deadline, want = time.monotonic() + timeout, f":{port:04X}"
    seen = ""
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError):
            seen = open(f"/proc/{pid}/net/tcp").read()
            if any(row.split()[1].endswith(want) and row.split()[3] == "0A"
                   for row in seen.splitlines()[1:]):
                return
        time.sleep(0.01)
    raise EngineError(f"iperf3 server not listening on {port} after {timeout} s: {seen[:200]!r}")
