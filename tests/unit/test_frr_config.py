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


# -- --templates ------------------------------------------------------------------------

SHIPPED = ROOT / "frr-templates"


def test_a_template_directory_replaces_ours_and_the_rest_are_ours(tmp_path):
    (tmp_path / "bgpd.conf.j2").write_text(
        (SHIPPED / "bgpd.conf.j2").read_text().replace(" coalesce-time 0\n", " coalesce-time 7\n"))
    _, plan, ours = rendered("clos-2x4")
    mine = render.render(plan, tmp_path)
    assert " coalesce-time 7\n" in mine.files["leaf1"]["bgpd.conf"]
    assert " coalesce-time 7\n" in mine.files["leaf1"]["frr.conf"]
    assert mine.files["leaf1"]["zebra.conf"] == ours.files["leaf1"]["zebra.conf"]  # ours
    assert mine.templates == str(tmp_path.resolve()) and ours.templates is None
    assert load_topology(ROOT / "topologies/clos-2x4.yaml", templates=tmp_path)[2] == mine


@pytest.mark.parametrize("text, words", [
    ("router bgp {{ node.asn }\n", ["bgpd.conf.j2: line 1: template: unexpected '}'"]),
    ("hostname x\nrouter bgp {{ node.nosuch }}\n",
     ["bgpd.conf.j2: line 2: template: rendering spine1:", "nosuch"]),
])
def test_a_broken_template_is_one_line_naming_file_and_line(tmp_path, text, words):
    from emulator.errors import SpecError

    (tmp_path / "bgpd.conf.j2").write_text(text)
    _, plan, _ = rendered("clos-2x4")
    with pytest.raises(SpecError) as e:
        render.render(plan, tmp_path)
    assert "\n" not in str(e.value) and e.value.exit_code == 2
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("reach", ["''.__class__.__mro__[1].__subclasses__()",
                                   "node.__class__.__init__.__globals__",
                                   "cycler.__init__.__globals__.os"])
def test_a_template_cannot_reach_python_internals(tmp_path, reach):
    from emulator.errors import SpecError

    (tmp_path / "bgpd.conf.j2").write_text(f"hostname x\n! {{{{ {reach} }}}}\n")
    _, plan, _ = rendered("clos-2x4")
    with pytest.raises(SpecError) as e:
        render.render(plan, tmp_path)
    message = str(e.value)
    assert "\n" not in message and e.value.exit_code == 2, message
    assert message.startswith(f"{tmp_path / 'bgpd.conf.j2'}: line 2: template: rendering ")
    assert "unsafe" in message or "undefined" in message, message


def test_a_template_that_replaces_nothing_is_refused(tmp_path):
    from emulator.errors import SpecError

    (tmp_path / "bgp.conf.j2").write_text("hostname x\n")
    _, plan, _ = rendered("clos-2x4")
    with pytest.raises(SpecError, match="bgp.conf.j2: --templates: replaces no template of ours"):
        render.render(plan, tmp_path)
    with pytest.raises(SpecError, match="is not a directory"):
        render.render(plan, tmp_path / "nope")


def test_render_cli_takes_templates(tmp_path):
    from click.testing import CliRunner

    from emulator.cli import main

    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "bgpd.conf.j2").write_text("router bgp {{ node.asn }\n")
    res = CliRunner().invoke(main, ["render", str(ROOT / "topologies/clos-2x4.yaml"), "-o",
                                    str(tmp_path / "out"), "--templates", str(tmp_path / "t")])
    assert res.exit_code == 2 and "unexpected '}'" in res.stderr
    assert not (tmp_path / "out").exists()  # nothing written


# -- snippets, frr_configs ---------------------------------------------------------------

def _topo(tmp_path, **extra) -> Path:
    import yaml

    data = {"name": "mine", "spines": 2, "leaves": 2} | extra
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(data))
    return tmp_path / "t.yaml"


def test_snippets_are_user_configs_and_start_the_daemons_they_need(tmp_path):
    _, plan, r = load_topology(_topo(tmp_path, overrides={
        "leaf1": {"frr": "ip route 10.9.0.0/24 10.2.0.1\n"},
        "leaf2": {"frr": "bfd\n profile slow\n exit\nexit\n"}}))
    assert render.daemons_for(plan, plan.node("leaf1")) == ["zebra", "bgpd", "staticd"]
    assert render.daemons_for(plan, plan.node("leaf2")) == ["zebra", "bgpd", "bfdd"]
    assert render.daemons_for(plan, plan.node("spine1")) == ["zebra", "bgpd"]
    assert r.user["leaf1"] == (render.UserConfig(render.SNIPPET, "ip route 10.9.0.0/24 10.2.0.1\n",
                                                 render.SNIPPET_FILE),)
    assert "spine1" not in r.user


def test_frr_configs_replace_a_routers_whole_configuration(tmp_path):
    (tmp_path / "saved" / "leaf1").mkdir(parents=True)
    mine = "frr version 8.4.4\nhostname leaf1\nrouter bgp 65101\nexit\n!\nend\n"
    (tmp_path / "saved" / "leaf1" / "frr.conf").write_text(mine)
    (tmp_path / "saved" / "notarouter").mkdir()
    _, plan, r = load_topology(_topo(tmp_path, frr_configs="saved",
                                     overrides={"leaf1": {"frr": "route-map A permit 10"}}))
    path = str(tmp_path / "saved" / "leaf1" / "frr.conf")
    assert [u.what for u in r.user["leaf1"]] == [path, render.SNIPPET]  # the file, then the snippet
    assert r.user["leaf1"][0].file == render.FRR_CONFIGS_FILE
    for daemon in ("zebra", "bgpd", "bfdd", "staticd"):  # frr_configs: every daemon, configs minimal
        text = r.files["leaf1"][f"{daemon}.conf"]
        assert "router bgp" not in text and path in text and "hostname leaf1" in text
    assert r.files["leaf1"]["frr.conf"] == ("frr version 8.4.4\nhostname leaf1\nrouter bgp 65101\n"
                                            "exit\n! overrides: frr (the topology's own configuration "
                                            "for this router)\nroute-map A permit 10\n!\nend\n")
    assert "router bgp 65102" in r.files["leaf2"]["bgpd.conf"]  # no file: rendered as ever
    assert "leaf2" not in r.user


def test_a_missing_frr_configs_directory_is_a_bad_file(tmp_path):
    from emulator.errors import SpecError

    with pytest.raises(SpecError, match="frr_configs: .*saved is not a directory"):
        load_topology(_topo(tmp_path, frr_configs="saved"))


# -- what FRR says, in one line --------------------------------------------------------------

def test_rejected_from_a_dry_run():
    from emulator.frr import rejected

    text = "ip prefix-list P seq 10 permit 10.2.0.0/24\nroute-map X permt 10\n"
    msg = rejected("leaf1", render.SNIPPET, text, "",
                   "line 2: % Unknown command[59]: route-map X permt 10\n", 2)
    assert msg == ('leaf1: FRR rejected line 2 of the overrides frr snippet: '
                   '"route-map X permt 10": % Unknown command')
    msg = rejected("leaf1", "/x/frr.conf", "router bgp 65999\n",
                   "BGP is already running; AS is 65101\n% [ZEBRA] Unknown command: "
                   "XFRR_end_configuration\n",
                   "line 1: Failure to communicate[13] to bgpd, line: router bgp 65999\n", 2)
    assert msg.endswith('line 1 of /x/frr.conf: "router bgp 65999": BGP is already running; '
                        'AS is 65101')


def test_refused_by_names_the_line_vtysh_stopped_at():
    from emulator.frr import config_lines, refused_by

    text = "! mine\nroute-map A permit 10\nexit\n\nrouter bgp 65102\n neighbor nosuch route-map A out\n"
    commands = config_lines(text)
    assert [n for n, _ in commands] == [2, 3, 5, 6]
    out = ("vm# configure terminal\nvm(config)# route-map A permit 10\nvm(config-route-map)# exit\n"
           "vm(config)# router bgp 65102\nvm(config-router)#  neighbor nosuch route-map A out\n"
           "% Specify remote-as or peer-group commands first\n")
    assert refused_by("leaf2", render.SNIPPET, commands, out, "", 1) == (
        'leaf2: FRR rejected line 6 of the overrides frr snippet: "neighbor nosuch route-map A '
        'out": % Specify remote-as or peer-group commands first')



def test_an_frr_configs_file_is_read_with_a_bound(tmp_path):
    from emulator.errors import SpecError

    (tmp_path / "saved" / "leaf1").mkdir(parents=True)
    (tmp_path / "saved" / "leaf1" / "frr.conf").write_bytes(b"!" * ((1 << 20) + 1))
    with pytest.raises(SpecError, match=r"frr.conf: frr_configs: cannot read: is 1048577 bytes; "
                                        r"at most 1048576$"):
        load_topology(_topo(tmp_path, frr_configs="saved"))


@pytest.mark.parametrize("kind", ["fifo", "big"])
def test_a_template_that_is_not_a_small_regular_file_is_refused_unread(tmp_path, kind):
    import os

    from emulator.errors import SpecError

    t = tmp_path / "bgpd.conf.j2"
    if kind == "fifo":
        os.mkfifo(t)  # Jinja2 would wait for a writer forever
    else:
        t.write_bytes(b"!" * ((1 << 20) + 1))
    _, plan, _ = rendered("clos-2x4")
    with pytest.raises(SpecError) as e:
        render.render(plan, tmp_path)
    assert str(e.value).startswith(f"{t}: --templates: cannot read: ")
    assert ("is a FIFO" if kind == "fifo" else "at most 1048576") in str(e.value)
