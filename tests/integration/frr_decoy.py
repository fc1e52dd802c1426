"""A decoy of the host's FRR, seen only by one command (test_exec_isolation's helper).

    unshare --mount --propagation private -- python frr_decoy.py DIR -- ARGV...

In the private mount namespace `unshare` made, covers DIR (the host's FRR socket
directory) with a fresh tmpfs, listens there on zebra.vty counting connections, runs ARGV
and prints one JSON object: its exit code and output, the connections, and DIR's listing
before and after. The host's DIR, and an FRR the host runs there, are never touched.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading


def serve(server: socket.socket, hits: list[int], stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            conn, _ = server.accept()
        except OSError:
            continue
        hits.append(1)
        conn.close()


def main(directory: str, argv: list[str]) -> dict:
    if os.readlink("/proc/self/ns/mnt") == os.readlink(f"/proc/{os.getppid()}/ns/mnt"):
        sys.exit("frr_decoy: in its caller's mount namespace (run it under unshare --mount)")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "rocelab-decoy", directory],
                   check=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(os.path.join(directory, "zebra.vty"))
    server.listen(8)
    server.settimeout(0.2)
    hits: list[int] = []
    stop = threading.Event()
    thread = threading.Thread(target=serve, args=(server, hits, stop), daemon=True)
    thread.start()
    before = sorted(os.listdir(directory))
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    finally:
        stop.set()
        thread.join()
        server.close()
    return {"rc": res.returncode, "stdout": res.stdout, "stderr": res.stderr, "hits": len(hits),
            "before": before, "after": sorted(os.listdir(directory))}


if __name__ == "__main__":
    sep = sys.argv.index("--")
    print(json.dumps(main(sys.argv[1], sys.argv[sep + 1:])))
