"""The agent inside an rxe guest: JSON lines over virtio-serial ports. Stdlib only.

The guest's /init starts it with the host's Python (the host's root is the guest's,
read-only over 9p). It serves every virtio-serial port named `rocelab.N` (one host
client per port at a time), one thread per request, replies tagged with the
request's id:

    {"id": 1, "op": "hello"}                                   -> {"id": 1, "ok": true, "host": ...}
    {"id": 2, "op": "run", "argv": [...], "env": {}, "timeout": 30}
                                        -> {"id": 2, "ok": true, "rc": 0, "stdout": "", "stderr": ""}
    {"id": 3, "op": "spawn", "argv": [...], "env": {}}         -> {"id": 3, "ok": true, "job": 1}
    {"id": 4, "op": "wait", "job": 1, "timeout": 5}            -> {..., "rc": 0 | null}
    {"id": 5, "op": "read", "job": 1}                          -> {..., "stdout": "", "stderr": ""}
    {"id": 6, "op": "kill", "job": 1}                          -> {..., "rc": -15}
    {"id": 7, "op": "counters"}                 -> {..., "counters": {"rcvd_pkts": 12, ...}}

An error is {"id": n, "ok": false, "error": "..."}. When the agent starts it says
{"event": "hello", ...} on every port; when a host client goes away, the commands
its `run` requests started are killed (spawned jobs live on).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

PORT_PREFIX = "rocelab."
JOBS = Path("/tmp/rocelab-jobs")
COUNTERS = Path("/sys/class/infiniband/rxe0/ports/1/hw_counters")
MAX_LINE = 16 << 20  # bytes of one message either way (a `run` reply carries its output)
RECONNECT_POLL_S = 0.05  # the host side of a port is closed: poll(2) says POLLHUP at once


def encode(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


class LineTooLong(ValueError):
    """A message passed MAX_LINE bytes without its newline."""


class Lines:
    """Split a byte stream into complete lines (a message may arrive in pieces), each at
    most `max_line` bytes: a longer one is never buffered whole (LineTooLong; the host
    drops the connection, the agent skips the rest of that line)."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.buf = b""
        self.max_line = max_line
        self.skipping = False  # inside a line already refused: drop up to its newline

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        if self.skipping:
            if not lines:
                self.buf = b""
                return []
            lines, self.skipping = lines[1:], False
        if len(self.buf) > self.max_line or any(len(line) > self.max_line for line in lines):
            self.skipping, self.buf = len(self.buf) > self.max_line, b""
            raise LineTooLong(f"a message longer than {self.max_line} bytes")
        return [line for line in lines if line.strip()]


def counters(path: Path = COUNTERS) -> dict[str, int]:
    out = {}
    for f in sorted(path.iterdir()) if path.is_dir() else []:
        try:
            out[f.name] = int(f.read_text().strip())
        except (OSError, ValueError):
            continue
    return out


class Jobs:
    """Background commands: output to files under JOBS, ids counted from 1."""

    def __init__(self) -> None:
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.lock = threading.Lock()

    def spawn(self, argv: list[str], env: dict[str, str]) -> int:
        JOBS.mkdir(parents=True, exist_ok=True)
        with self.lock:
            job = len(self.procs) + 1
            with open(JOBS / f"{job}.out", "wb") as out, open(JOBS / f"{job}.err", "wb") as err:
                self.procs[job] = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                                   stdout=out, stderr=err, start_new_session=True)
        return job

    def get(self, job: int) -> subprocess.Popen[bytes]:
        if job not in self.procs:
            raise KeyError(f"no job {job}")
        return self.procs[job]

    def read(self, job: int) -> dict[str, Any]:
        self.get(job)
        return {n: (JOBS / f"{job}.{ext}").read_text(errors="replace")
                for n, ext in (("stdout", "out"), ("stderr", "err"))}


def base_env(extra: dict[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")} | (extra or {})


class Session:
    """One host client on one port: requests in, replies out, its `run` children."""

    def __init__(self, fd: int, jobs: Jobs) -> None:
        self.fd = fd
        self.jobs = jobs
        self.wlock = threading.Lock()
        self.running: set[subprocess.Popen[bytes]] = set()

    def send(self, msg: dict[str, Any]) -> None:
        data = encode(msg)
        with self.wlock:
            while data:
                try:
                    data = data[os.write(self.fd, data):]
                except OSError:  # the host went away: the reply is lost with it
                    return

    def handle(self, line: bytes) -> None:
        rid = None
        try:
            req = json.loads(line)
            rid = req.get("id")
            reply = self.dispatch(req)
            self.send({"id": rid, "ok": True} | reply)
        except Exception as e:  # noqa: BLE001 -- every failure is a reply, never a dead agent
            self.send({"id": rid, "ok": False, "error": f"{type(e).__name__}: {e}"})

    def dispatch(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "hello":
            return {"host": socket.gethostname(), "pid": os.getpid()}
        if op == "run":
            return self.run(req["argv"], req.get("env"), req.get("timeout"))
        if op == "spawn":
            return {"job": self.jobs.spawn(req["argv"], base_env(req.get("env")))}
        if op == "wait":
            try:
                return {"rc": self.jobs.get(req["job"]).wait(req.get("timeout"))}
            except subprocess.TimeoutExpired:
                return {"rc": None}
        if op == "kill":
            proc = self.jobs.get(req["job"])
            if proc.poll() is None:
                proc.terminate()
            return {"rc": proc.wait()}
        if op == "read":
            return self.jobs.read(req["job"])
        if op == "counters":
            return {"counters": counters()}
        raise ValueError(f"unknown op {op!r}")

    def run(self, argv: list[str], env: dict[str, str] | None, timeout: float | None) -> dict[str, Any]:
        proc = subprocess.Popen(argv, env=base_env(env), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.running.add(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            return {"rc": None, "timeout": True, "stdout": out.decode(errors="replace"),
                    "stderr": err.decode(errors="replace")}
        finally:
            self.running.discard(proc)
        return {"rc": proc.returncode, "stdout": out.decode(errors="replace"),
                "stderr": err.decode(errors="replace")}

    def close(self) -> None:
        for proc in list(self.running):
            if proc.poll() is None:
                proc.kill()


def serve_port(path: str, jobs: Jobs) -> None:
    """Serve one port forever: a session per host connection."""
    fd = os.open(path, os.O_RDWR)
    while True:
        session = Session(fd, jobs)
        session.send({"event": "hello", "host": socket.gethostname()})
        lines = Lines()
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                data = b""
            if not data:  # the host closed its end: this session is over
                break
            try:
                got = lines.feed(data)
            except LineTooLong as e:  # refused, not buffered: say so, read on
                session.send({"ok": False, "error": f"dropped {e}"})
                continue
            for line in got:
                threading.Thread(target=session.handle, args=(line,), daemon=True).start()
        session.close()
        _wait_for_host(fd)


def _wait_for_host(fd: int) -> None:
    """Block until a host client has connected again (data readable, no hang-up)."""
    import select

    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        events = poller.poll()
        if any(ev & select.POLLIN for _, ev in events):
            return
        time.sleep(RECONNECT_POLL_S)


def ports(root: Path = Path("/sys/class/virtio-ports")) -> list[str]:
    found = []
    for port in sorted(root.iterdir()) if root.is_dir() else []:
        name = (port / "name").read_text().strip() if (port / "name").exists() else ""
        if name.startswith(PORT_PREFIX):
            found.append(f"/dev/{port.name}")
    return found


def main() -> int:
    jobs = Jobs()
    paths = ports()
    if not paths:
        print("rocelab agent: no virtio-serial port named rocelab.*", file=sys.stderr)
        return 1
    threads = [threading.Thread(target=serve_port, args=(p, jobs), daemon=True) for p in paths]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
