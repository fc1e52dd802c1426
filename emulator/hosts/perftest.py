"""`rocelab perftest` as library calls: run a test between two hosts, or serve one.

An engine host's side runs in its engine (armed over the engine's unix
socket, `client.call`; the engine's side is perftest.py); a host whose 18515
is a real perftest (an rxe host where the user started `ib_write_bw`) is
simply connected to.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..engine import client as engines
from ..errors import EngineError
from ..perftest.session import Options
from ..plan import Node, Plan
from . import kind_of

SERVER_WAIT_S = 600.0


def is_engine_host(host: Node) -> bool:
    return kind_of(host).engine


def path_mtu(host: Node) -> int:
    """The RoCE path MTU a NIC on this port would run: the largest IB MTU that fits the
    port's MTU with the RoCEv2 headers (rxe's eth_mtu_int_to_enum)."""
    port = host.interfaces[0].mtu if host.interfaces else 1500
    return max((m for m in (256, 512, 1024, 2048, 4096) if m + 80 <= (port or 1500)), default=256)


def _call(plan: Plan, host: Node, msg: dict[str, Any],
          on_armed: Callable[[], None] | None = None) -> dict[str, Any]:
    def on_event(event: str, _reply: dict[str, Any]) -> None:
        if event == "armed" and on_armed:
            on_armed()

    return engines.call(plan, host, msg, on_event)


def serve(plan: Plan, host: Node, opts: Options, on_armed: Callable[[], None] | None = None,
          timeout_s: float = SERVER_WAIT_S) -> dict[str, Any]:
    """Arm a perftest server on `host`'s engine; return its session once a client ran."""
    if not is_engine_host(host):
        raise EngineError(f"{host.name} is not an engine host: start perftest there with "
                          f"`rocelab exec {plan.lab} {host.name} -- ib_{opts.test.value} ...`")
    engines.ensure_engines(plan, [host])
    return _call(plan, host, {"cmd": "perftest", "role": "server", "opts": opts.to_json(),
                              "timeout_s": timeout_s}, on_armed)


def run(plan: Plan, src: Node, dst: Node, opts: Options) -> dict[str, Any]:
    """src's engine runs the client against dst: an engine (armed here first) or a host
    already running a perftest server. Returns {"client": ..., "server": ... | None}."""
    if not is_engine_host(src):
        raise EngineError(f"--src {src.name}: the client side must be an engine host (on an rxe "
                          f"host run ib_{opts.test.value} with `rocelab exec`)")
    engines.ensure_engines(plan, [src])
    peer_ip = dst.address or ""
    if not is_engine_host(dst):
        return {"client": _request_client(plan, src, opts, peer_ip), "server": None}
    engines.ensure_engines(plan, [dst])
    armed = threading.Event()
    box: dict[str, Any] = {}

    def server() -> None:
        try:
            box["server"] = serve(plan, dst, opts, armed.set, timeout_s=SERVER_WAIT_S)
        except EngineError as e:
            box["error"] = e
        armed.set()

    t = threading.Thread(target=server, daemon=True)
    t.start()
    armed.wait(engines.START_TIMEOUT_S)
    if "error" in box:
        raise box["error"]
    try:
        cli = _request_client(plan, src, opts, peer_ip)
    finally:
        t.join(30.0)
    if "error" in box:
        raise box["error"]
    return {"client": cli, "server": box.get("server")}


def _request_client(plan: Plan, src: Node, opts: Options, peer_ip: str) -> dict[str, Any]:
    return _call(plan, src, {"cmd": "perftest", "role": "client", "opts": opts.to_json(),
                             "peer_ip": peer_ip})
