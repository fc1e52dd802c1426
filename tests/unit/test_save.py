"""`rocelab save`, offline: a running config made loadable, the saved topology, the
directory it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNNING = """Building configuration...

Current configuration:
!
frr version 8.4.4
frr defaults traditional
hostname leaf1
log file /run/rocelab/lab1/leaf1/zebra.log informational
no zebra nexthop kernel enable
frr defaults datacenter
log file /run/rocelab/lab1/leaf1/bgpd.log informational
hostname vm
service integrated-vtysh-config
!
router bgp 65101
 neighbor spine2 route-map TO-SPINE2 out
exit
!
ip prefix-list P seq 10 permit 10.2.0.0/24 le 32
!
route-map TO-SPINE2 deny 10
 match ip address prefix-list P
exit
!
end
"""


def test_a_running_config_is_cleaned_into_a_loadable_file():
    from emulator.paths import RUN_ROOT
    from emulator.save import clean_running_config

    text = clean_running_config(RUNNING.replace("/run/rocelab", str(RUN_ROOT)), "leaf1", "lab1")
    lines = text.splitlines()
    assert lines[1:5] == ["frr version 8.4.4", "frr defaults datacenter", "hostname leaf1", "!"]
    assert not [ln for ln in lines if ln.startswith(("log file", "service", "hostname vm",
                                                     "Building", "Current"))]
    assert lines.count("frr defaults datacenter") == 1
    # route-maps and prefix-lists before `router bgp` (BGP would wait 5 s for them otherwise)
    assert text.index("route-map TO-SPINE2 deny 10") < text.index("router bgp 65101")
    assert lines[-1] == "end" and text.index("router bgp") > text.index("ip prefix-list")


def test_the_saved_topology_points_at_the_saved_configs_and_drops_snippets():
    from emulator.save import saved_topology
    from emulator.spec import parse

    topo = parse({"name": "lab1", "spines": 2, "leaves": 2, "bgp": {"keepalive": 1, "hold": 3},
                  "overrides": {"leaf1": {"frr": "route-map A permit 10\n"},
                                "leaf2": {"frr": "! x\n", "bfd": {"enabled": True}}}})
    data = saved_topology(topo)
    assert data["frr_configs"] == "." and data["overrides"] == {"leaf2": {"bfd": {"enabled": True}}}
    again = parse(data)
    assert again.bgp == topo.bgp and again.spines == 2 and again.frr_configs == "."
    assert again.model_dump(exclude={"overrides", "frr_configs"}) == \
        topo.model_dump(exclude={"overrides", "frr_configs"})


def test_save_refuses_a_foreign_directory_and_replaces_an_earlier_save(tmp_path):
    from emulator.errors import RocelabError
    from emulator.save import MARKER, earlier_save

    assert earlier_save(tmp_path / "new") == [] and earlier_save(tmp_path) == []
    (tmp_path / "notes.txt").write_text("mine\n")
    with pytest.raises(RocelabError, match=r"not empty \(notes.txt\) and not a rocelab save"):
        earlier_save(tmp_path)
    out = tmp_path / "s"
    (out / "leaf1").mkdir(parents=True)
    (out / "topology.yaml").write_text(f"{MARKER} lab1\nname: lab1\n")
    (out / "leaf1" / "frr.conf").write_text("hostname leaf1\n")
    assert earlier_save(out) == [out / "topology.yaml", out / "leaf1" / "frr.conf"]
    (out / "leaf1" / "notes.txt").write_text("mine\n")
    with pytest.raises(RocelabError, match="holds leaf1/notes.txt, which no rocelab save wrote"):
        earlier_save(out)


def test_save_needs_root_and_a_lab():
    from click.testing import CliRunner

    from emulator.cli import main

    res = CliRunner().invoke(main, ["save", "nosuchlab"])
    assert res.exit_code == 64 and "--out" in res.stderr  # -o is required
