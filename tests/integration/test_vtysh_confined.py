"""The lab's vtysh saves into the router's run dir, never the host's /etc/frr (issue 24, item 2).

Debian's /etc/frr/vtysh.conf sets `service integrated-vtysh-config`, so a vtysh that
talks to a lab's daemons but reads the host's config directory writes `write memory`
into /etc/frr/frr.conf. Each way a user reaches vtysh -- `rocelab vtysh -c`, an
experiment's `vtysh:` action, a plain `vtysh` under `rocelab exec` -- runs here in a
private mount namespace whose /etc/frr is a tmpfs holding a decoy frr.conf of known
bytes (Debian's vtysh.conf beside it): the host's real /etc/frr is never written, and
the decoy must come out byte-identical while the saved config lands in the run dir.
Every command that could write runs under the decoy, so even broken code cannot write
the host's file (the module also compares the host's /etc/frr before and after).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.paths import node_run_dir

from .conftest import PREFIX, ROCELAB, cli, make_lab

NAME = f"{PREFIX}vtyconf"
HOST_FRR_CONF = Path("/etc/frr")
DECOY = b"! a decoy: `write memory` must never reach this file\nhostname the-host\n"
# Runs as root in its own mount namespace (unshare -m): /etc/frr there is a tmpfs with
# the decoy; runs the command; prints what it did and whether the decoy changed.
IN_DECOY = r"""
import json, os, subprocess, sys
subprocess.run(["mount", "--make-rslave", "/"], check=True)
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "xb-frr-decoy", "/etc/frr"],
               check=True)
with open("/etc/frr/vtysh.conf", "w") as f:
    f.write("service integrated-vtysh-config\n")
decoy = sys.argv[1].encode()
with open("/etc/frr/frr.conf", "wb") as f:
    f.write(decoy)
r = subprocess.run(sys.argv[2:], capture_output=True, text=True, timeout=180)
with open("/etc/frr/frr.conf", "rb") as f:
    same = f.read() == decoy
print(json.dumps({"rc": r.returncode, "out": r.stdout[-2000:], "err": r.stderr[-2000:],
                  "decoy_intact": same, "etc_frr": sorted(os.listdir("/etc/frr"))}))
"""


def _digests(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())
            if p.is_file()}


@pytest.fixture(scope="module")
def lab():
    assert HOST_FRR_CONF.is_dir(), "FRR is installed (the session checks), so is /etc/frr"
    before = _digests(HOST_FRR_CONF)
    yield from make_lab("topologies/clos-2x4.yaml", NAME)
    assert _digests(HOST_FRR_CONF) == before, "the host's own /etc/frr changed"


def under_decoy(*argv: str) -> dict:
    """Run argv with a decoy /etc/frr (private mount namespace); what it did."""
    res = subprocess.run(["unshare", "-m", "--propagation", "slave", sys.executable, "-c",
                          IN_DECOY, DECOY.decode(), *argv],
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def saved(router: str) -> str:
    return (node_run_dir(NAME, router) / "frr.conf").read_text()


def save_commands(marker: str) -> list[str]:
    """A change only this test makes, then `write memory`: the saved file must hold it."""
    return ["configure terminal", f"route-map {marker} permit 10", "end", "write memory"]


def test_write_memory_in_rocelab_vtysh_saves_into_the_routers_run_dir(lab):
    args = [a for c in save_commands("XB-VIA-VTYSH") for a in ("-c", c)]
    got = under_decoy(ROCELAB, "vtysh", NAME, "leaf1", *args)
    assert got["rc"] == 0, got["err"]
    assert got["decoy_intact"] and got["etc_frr"] == ["frr.conf", "vtysh.conf"]
    assert "route-map XB-VIA-VTYSH permit 10" in saved("leaf1")


def test_write_memory_in_an_experiments_vtysh_action_saves_into_the_run_dir(lab, tmp_path):
    exp = tmp_path / "save.yaml"
    exp.write_text(json.dumps({
        "name": "vtysh-save", "topology": str(Path("topologies/clos-2x4.yaml").resolve()),
        "duration": "30s", "flows": [{"name": "f", "src": "prefill1", "dst": "decode1", "size": "64K"}],
        "actions": [{"at": 0, "vtysh": {"node": "leaf2", "commands": save_commands("XB-VIA-ACTION")}}]}))
    got = under_decoy(ROCELAB, "run", str(exp), "--out", str(tmp_path / "out"), "--name", NAME)
    assert got["rc"] == 0, got["err"]
    assert got["decoy_intact"] and got["etc_frr"] == ["frr.conf", "vtysh.conf"]
    assert "route-map XB-VIA-ACTION permit 10" in saved("leaf2")


def test_write_memory_in_a_plain_vtysh_under_exec_saves_into_the_run_dir(lab):
    args = [a for c in save_commands("XB-VIA-EXEC") for a in ("-c", c)]
    got = under_decoy(ROCELAB, "exec", NAME, "leaf3", "--", "vtysh", *args)
    assert got["rc"] == 0, got["err"]
    assert got["decoy_intact"] and got["etc_frr"] == ["frr.conf", "vtysh.conf"]
    assert "route-map XB-VIA-EXEC permit 10" in saved("leaf3")
    assert "Can't open configuration file" not in got["err"]  # the run dir has vtysh's own file


def test_a_saved_config_breaks_neither_down_nor_the_next_up(lab):
    """`write memory` leaves frr.conf (0640) and frr.conf.sav in the run dir; `down` still
    removes it, and the next `up` starts from the rendered configuration again."""
    got = under_decoy(ROCELAB, "vtysh", NAME, "spine1",  # a decoy still: on broken code the
                      *[a for c in save_commands("XB-SAVED") for a in ("-c", c)])  # host's is safe
    assert got["rc"] == 0 and got["decoy_intact"], got
    assert (node_run_dir(NAME, "spine1") / "frr.conf.sav").exists()
    lab.down()
    assert not node_run_dir(NAME, "spine1").parent.exists()
    lab.up()
    assert "XB-SAVED" not in cli("vtysh", NAME, "spine1", "-c", "show running-config").stdout
    assert "XB-SAVED" not in saved("spine1")
