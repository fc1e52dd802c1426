"""Your own FRR configuration, offline: the integrated frr.conf and host.sh a render
writes (portable: they rebuild a router or host outside rocelab)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from emulator import render
from emulator.lab import load_topology
from emulator.plan import Homing

ROOT = Path(__file__).resolve().parents[2]


def rendered(stem: str, **extra):
    return load_topology(ROOT / "topologies" / f"{stem}.yaml")


def test_integrated_config_is_one_vtysh_file_with_every_daemon():
    _, plan, r = rendered("clos-2x4-bfd")
    text = r.files["leaf1"]["frr.conf"]
    lines = text.splitlines()
    assert lines[1:5] == ["frr version 8.4.4", "frr defaults datacenter", "hostname leaf1", "!"]
    assert lines[-1] == "end" and lines.count("end") == 1  # one end, the last line
    assert sum(1 for ln in lines if ln.startswith("hostname ")) == 1
    assert not [ln for ln in lines if ln.startswith("log ")]  # per-daemon logs live in the run dir
    assert "rendered by rocelab, do not edit" not in text  # the daemon files' own headers
    for needle in ("no zebra nexthop kernel enable", "router bgp 65101", "bfd\n profile fabric",
                   "neighbor FABRIC bfd profile fabric"):
        assert needle in text, needle
    # zebra's RA lines and the address of each interface share one stanza
    assert "interface spine1\n ipv6 nd ra-interval 1\n no ipv6 nd suppress-ra\nexit" in text
    assert "interface lo\n ip address 10.0.0.3/32\nexit" in text
    assert text.count("interface spine1\n") == 1


def test_integrated_config_carries_every_address_of_a_numbered_router():
    _, plan, r = rendered("clos-2x4-numbered")
    leaf = plan.node("leaf1")
    text = render.integrated_config(plan, r, "leaf1")
    assert text == r.files["leaf1"]["frr.conf"]
    for port in leaf.interfaces:
        assert f"interface {port.name}\n ip address {port.address}\nexit" in text


def test_the_snippet_comes_last_before_end():
    topo = {"name": "snip", "spines": 2, "leaves": 2, "overrides": {
        "leaf": {"frr": "route-map A permit 10"}, "leaf1": {"frr": "route-map B permit 10\n"}}}
    _, plan, r = load_topology(topo)
    text = r.files["leaf1"]["frr.conf"]
    assert text.endswith("route-map A permit 10\nroute-map B permit 10\n!\nend\n")  # role < node
    assert text.index("router bgp") < text.index("route-map A permit 10")
    assert "route-map A" not in r.files["spine1"]["frr.conf"]


@pytest.mark.skipif(not shutil.which("vtysh"), reason="needs FRR's vtysh")
@pytest.mark.parametrize("stem", ["clos-2x4", "clos-2x4-numbered", "clos-2x4-bfd", "clos-2x4-dual",
                                  "evpn-2x4", "clos-3tier"])
def test_vtysh_accepts_every_integrated_config(tmp_path, stem):
    _, plan, r = rendered(stem)
    for node in plan.frr_nodes:
        f = tmp_path / f"{node.name}.conf"
        f.write_text(r.files[node.name]["frr.conf"])
        res = subprocess.run(["vtysh", "-C", "-f", str(f)], capture_output=True, text=True)
        assert res.returncode == 0, (node.name, res.stderr)


def test_host_script_single_homed():
    _, plan, r = rendered("clos-2x4")
    host = plan.node("prefill1")
    assert r.files["prefill1"] == {"host.sh": render.host_script(plan, host)}
    assert render.host_script(plan, host).splitlines()[2:] == [
        "set -e", "ip link set dev eth0 mtu 9000 up", "ip address add 10.2.0.1/31 dev eth0",
        "ip route add default via 10.2.0.0 dev eth0"]


def test_host_script_dual_homed_has_its_loopback_and_a_multipath_default():
    _, plan, _ = rendered("clos-2x4-dual")
    host = next(h for h in plan.hosts if h.homing is Homing.DUAL)
    lines = render.host_script(plan, host).splitlines()
    gw = [(p.name, plan.peer_address(p)) for p in host.interfaces]
    assert f"ip address add {host.loopback}/32 dev lo" in lines
    assert lines[-1] == "ip route add default " + " ".join(
        f"nexthop via {a} dev {d}" for d, a in gw)
    assert "sysctl -qw net.ipv4.conf.all.ignore_routes_with_linkdown=1" in lines


def test_host_script_rail_routes_each_rail_over_its_nic():
    _, plan, _ = rendered("rail-4x8")
    host = plan.hosts[0]
    script = render.host_script(plan, host)
    for route in host.routes:
        (gw, dev), = route.via
        dst = "default" if route.dst == "0.0.0.0/0" else route.dst
        assert f"ip route add {dst} via {gw} dev {dev}\n" in script
    assert script.count("ip address add ") == len(host.interfaces)


def test_render_writes_frr_conf_and_host_sh_and_replaces_them(tmp_path):
    _, plan, r = rendered("clos-2x4")
    out = tmp_path / "r"
    render.write(r, out)
    assert (out / "leaf1" / "frr.conf").read_text() == r.files["leaf1"]["frr.conf"]
    assert (out / "decode4" / "host.sh").read_text() == r.files["decode4"]["host.sh"]
    render.write(r, out)  # an earlier render owns its frr.conf and host.sh
    assert sorted(p.name for p in (out / "prefill1").iterdir()) == ["host.sh"]


def test_l2_switches_get_no_frr_conf():
    _, plan, r = rendered("l2-2x4")
    assert all(r.files[n.name] == {} for n in plan.routers)
    assert all("host.sh" in r.files[h.name] for h in plan.hosts)
