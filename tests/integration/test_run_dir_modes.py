"""A real lab, started under umask 000 in a shared run root (mode 1777, as /tmp): FRR still
reaches its dirs through a lab dir only root and group frr may pass (0710), nothing of the
lab is readable or connectable by other users, and the run root keeps its mode."""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from pathlib import Path

from .conftest import PREFIX, ROCELAB


def _mode(p: Path) -> str:
    st = p.stat()
    return f"{stat.S_IMODE(st.st_mode):o} {st.st_uid}:{st.st_gid}"


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    res = subprocess.run([ROCELAB, *args], env=env, umask=0, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, f"rocelab {' '.join(args)} -> {res.returncode}\n{res.stderr}"
    return res


def test_a_lab_under_umask_0_in_a_shared_run_root_keeps_to_itself():
    import grp
    import pwd

    frr_uid, frr_gid = pwd.getpwnam("frr").pw_uid, grp.getgrnam("frr").gr_gid
    root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}runroot-", dir="/tmp"))
    root.chmod(0o1777)
    env = os.environ | {"ROCELAB_RUN_ROOT": str(root)}
    name = f"{PREFIX}modes"
    try:
        _run(env, "up", "topologies/clos-2x4.yaml", "--name", name)  # converged: FRR got in
        _run(env, "transfer", name, "--src", "prefill1", "--dst", "decode1", "--size", "64KiB")
        lab = root / name
        assert _mode(lab) == f"710 0:{frr_gid}"
        assert _mode(lab / "state.json") == "600 0:0"
        assert _mode(lab / "leaf1") == f"700 {frr_uid}:{frr_gid}"
        assert _mode(lab / "leaf1" / "bgpd.conf") == f"640 {frr_uid}:{frr_gid}"
        assert _mode(lab / "prefill1") == "700 0:0"
        for f in ("engine.sock", "engine.log"):
            assert _mode(lab / "prefill1" / f) == "600 0:0", f
        bgp = _run(env, "vtysh", name, "leaf1", "-c", "show bgp summary").stdout
        assert "Total number of neighbors" in bgp  # root's vtysh reaches FRR's sockets
    finally:
        subprocess.run([ROCELAB, "down", name], env=env, capture_output=True, timeout=300)
        assert stat.S_IMODE(root.stat().st_mode) == 0o1777  # never chmodded
        root.rmdir()  # empty: the lab left nothing behind
