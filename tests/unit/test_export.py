"""`rocelab export --format containerlab`: every shipped topology exports to a file
containerlab's own schema accepts, whose links name exactly the interfaces the
node configs use; the export of clos-2x4 is a golden file; and `-o` keeps
render's rules (new, empty or an earlier export; anything else refused untouched).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from emulator import export, realize, render
from emulator.cli import main
from emulator.errors import ExitCode, RocelabError
from emulator.lab import load_topology
from emulator.plan import Kind

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGIES = sorted((ROOT / "topologies").glob("*.yaml"))
SCHEMA = json.loads((ROOT / "tests/fixtures/containerlab/clab.schema.json").read_text())
ENDPOINT = re.compile(r"^(\S+):(\S+)$")  # the schema's prefixItems pattern (draft-07 ignores it)


def _export(path: Path) -> tuple:
    _, plan, rendered = load_topology(path)
    ex = export.containerlab(plan, rendered)
    return plan, ex, yaml.safe_load(ex.files[ex.clab_file])


@pytest.fixture(params=TOPOLOGIES, ids=lambda p: p.stem, scope="module")
def exported(request):
    return _export(request.param)


def test_the_shipped_topologies_include_the_new_fabrics():
    assert {"clos-3tier", "rail-4x8", "clos-2x4-dual"} <= {p.stem for p in TOPOLOGIES}


def test_every_export_is_valid_against_containerlabs_schema(exported):
    _, ex, clab = exported
    errors = sorted(jsonschema.Draft7Validator(SCHEMA).iter_errors(clab), key=str)
    assert not errors, f"{ex.clab_file}: {errors[0].message} at {list(errors[0].absolute_path)}"
    for link in clab["topology"]["links"]:
        assert len(link["endpoints"]) == 2 and all(ENDPOINT.match(e) for e in link["endpoints"])
    assert ex.files[ex.clab_file].startswith(export.MARKER)


def test_links_are_the_plans_links_with_its_interface_names_and_mtus(exported):
    plan, _, clab = exported
    got = [(tuple(link["endpoints"]), link["mtu"]) for link in clab["topology"]["links"]]
    want = [((f"{link.a}:{link.a_ifname}", f"{link.b}:{link.b_ifname}"),
             plan.port_mtu(plan.node(link.a).interface(link.a_ifname))) for link in plan.links]
    assert got == want
    assert set(clab["topology"]["nodes"]) == {n.name for n in plan.nodes}


def _ends(clab: dict) -> dict[str, set[str]]:
    ends: dict[str, set[str]] = {}
    for link in clab["topology"]["links"]:
        for end in link["endpoints"]:
            node, ifname = ENDPOINT.match(end).groups()
            ends.setdefault(node, set()).add(ifname)
    return ends


def test_every_link_interface_is_in_its_nodes_config_and_nothing_else_is(exported):
    """The names in the clab links, frr.conf's interface stanzas and neighbors, host.sh's
    and bridge.sh's devices: one set per node."""
    plan, ex, clab = exported
    ends = _ends(clab)
    for node in plan.nodes:
        mine = ends[node.name]
        assert mine == {p.name for p in node.interfaces}
        conf = ex.files.get(f"configs/{node.name}/frr.conf")
        if node in plan.frr_nodes:
            stanzas = set(re.findall(r"^interface (\S+)$", conf, re.M)) - {"lo"}
            assert stanzas <= mine, f"{node.name}: frr.conf configures {stanzas - mine}"
            needs = {p.name for p in node.interfaces if p.address or (p.fabric and not p.bridged)}
            assert needs <= stanzas, f"{node.name}: no interface stanza for {needs - stanzas}"
            for p in node.interfaces:
                if p.address:
                    assert re.search(rf"^interface {p.name}\n ip address {p.address}$", conf, re.M)
            neighbors = set(re.findall(r"^ neighbor (\S+) interface peer-group", conf, re.M))
            assert neighbors <= mine
        else:
            assert conf is None
        script = ex.files.get(f"configs/{node.name}/host.sh")
        if node.kind is Kind.HOST:
            devs = set(re.findall(r"\bdev (\S+)", script)) - {"lo"}
            assert devs == mine, f"{node.name}: host.sh uses {devs}, links give {mine}"
        bridge = ex.files.get(f"configs/{node.name}/bridge.sh")
        if node.bridge:
            ports = set(re.findall(r"^ip link set dev (\S+) master br0$", bridge, re.M))
            assert ports - {plan.l2.vxlan} == {p.name for p in node.interfaces if p.bridged} <= mine
        else:
            assert bridge is None


def test_every_bind_is_an_exported_file_and_every_file_is_bound(exported):
    _, ex, clab = exported
    bound = set()
    for name, node in clab["topology"]["nodes"].items():
        for bind in node.get("binds", []):
            src, dst = bind.split(":")
            assert src in ex.files and src.startswith(f"configs/{name}/"), bind
            bound.add(src)
        for cmd in node.get("exec", []):  # scripts run from where they are bound
            if cmd.startswith("sh "):
                assert any(b.endswith(":" + cmd[3:]) for b in node["binds"]), cmd
    assert bound == set(ex.files) - {ex.clab_file}
    assert ex.executable <= bound


def test_nodes_are_linux_containers_hosts_without_a_management_eth0(exported):
    plan, _, clab = exported
    for node in plan.nodes:
        entry = clab["topology"]["nodes"][node.name]
        assert entry["kind"] == "linux"
        if node.kind is Kind.HOST:  # containerlab allows eth0 in a link only then
            assert entry["network-mode"] == "none" and entry["image"] == export.HOST_IMAGE
        elif node in plan.frr_nodes:
            assert entry["image"] == export.ROUTER_IMAGE
            assert f"configs/{node.name}/frr.conf:/etc/frr/frr.conf" in entry["binds"]
        else:
            assert "network-mode" not in entry and "eth0" not in {p.name for p in node.interfaces}


def _dotted(table: dict[str, str]) -> dict[str, str]:
    return {k.replace("/", "."): v for k, v in table.items() if "disable_ipv6" not in k}


def test_sysctls_are_the_ones_realize_writes(exported):
    """containerlab sets disable_ipv6=0 itself; an l2 switch's disable_ipv6=1 is in bridge.sh."""
    plan, ex, clab = exported
    for node in plan.nodes:
        got = clab["topology"]["nodes"][node.name]["sysctls"]
        if node.is_router and plan.routed:
            want = realize.COMMON_SYSCTLS | realize.ROUTER_SYSCTLS | realize.hash_sysctls(node)
        elif node.is_router:
            want = dict(realize.COMMON_SYSCTLS)
            assert "net.ipv6.conf.all.disable_ipv6=1" in ex.files[f"configs/{node.name}/bridge.sh"]
        elif len(node.interfaces) > 1:
            want = realize.COMMON_SYSCTLS | realize.MULTIHOMED_HOST_SYSCTLS | realize.hash_sysctls(node)
        else:
            want = dict(realize.COMMON_SYSCTLS)
        assert got == _dotted(want), node.name


def test_the_daemons_file_runs_what_up_starts():
    _, plan, rendered = load_topology(ROOT / "topologies/clos-2x4-bfd.yaml")
    files = export.containerlab(plan, rendered).files
    assert "bfdd=yes" in files["configs/leaf1/daemons"] and "staticd=no" in files["configs/leaf1/daemons"]
    _, plan, rendered = load_topology(ROOT / "topologies/clos-2x4-dual.yaml")
    files = export.containerlab(plan, rendered).files
    leaf = files["configs/leaf1/daemons"]
    assert "staticd=yes" in leaf and "bfdd=no" in leaf and "bgpd=yes" in leaf
    assert re.search(r"^ip route \S+/32 \S+$", files["configs/leaf1/frr.conf"], re.M)


def test_an_end_with_its_own_mtu_is_set_by_exec(tmp_path):
    topo = yaml.safe_load((ROOT / "topologies/clos-2x4.yaml").read_text())
    topo["overrides"] = {"spine1": {"mtu": 1500}}
    _, plan, rendered = load_topology(topo)
    clab = yaml.safe_load(export.containerlab(plan, rendered).files["clos-2x4.clab.yml"])
    assert "ip link set dev leaf1 mtu 1500" in clab["topology"]["nodes"]["spine1"]["exec"]
    assert "exec" not in clab["topology"]["nodes"]["spine2"]


def test_golden_export_of_clos_2x4(golden):
    _, ex, _ = _export(ROOT / "topologies/clos-2x4.yaml")
    for rel, text in ex.files.items():
        golden(f"export/clos-2x4/{rel}", text)


# -- templates and frr_configs ---------------------------------------------------------

def test_templates_come_first_and_the_shipped_ones_fill_in(tmp_path):
    _, plan, rendered = load_topology(ROOT / "topologies/clos-2x4.yaml")
    same = render.render(plan, ROOT / "frr-templates")
    assert {n: f["frr.conf"] for n, f in same.files.items() if "frr.conf" in f} == \
        {n: f["frr.conf"] for n, f in rendered.files.items() if "frr.conf" in f}
    shipped = (ROOT / "frr-templates/bgpd.conf.j2").read_text()
    (tmp_path / "bgpd.conf.j2").write_text(shipped.replace(" coalesce-time 0\n", " coalesce-time 7\n"))
    mine = render.render(plan, tmp_path)
    assert " coalesce-time 7\n" in mine.files["leaf1"]["frr.conf"]
    assert "no zebra nexthop kernel enable" in mine.files["leaf1"]["frr.conf"]  # zebra's, shipped


def test_a_broken_template_is_one_error_naming_it(tmp_path):
    _, plan, _ = load_topology(ROOT / "topologies/clos-2x4.yaml")
    (tmp_path / "bgpd.conf.j2").write_text("router bgp {{ node.no_such_field }}\n")
    with pytest.raises(RocelabError, match="no_such_field"):
        render.render(plan, tmp_path)


def test_frr_configs_replace_the_rendered_frr_conf(tmp_path):
    topo = yaml.safe_load((ROOT / "topologies/clos-2x4.yaml").read_text()) | {"frr_configs": "saved"}
    (tmp_path / "saved/leaf1").mkdir(parents=True)
    (tmp_path / "saved/leaf1/frr.conf").write_text("hostname leaf1\n! saved\n")
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(topo))
    _, plan, rendered = load_topology(tmp_path / "t.yaml")
    files = export.containerlab(plan, rendered).files
    assert files["configs/leaf1/frr.conf"] == "hostname leaf1\n! saved\nend\n"  # as saved, closed
    assert files["configs/leaf2/frr.conf"] == rendered.files["leaf2"]["frr.conf"]


# -- the output directory ------------------------------------------------------------

def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def test_export_writes_then_replaces_an_earlier_export(tmp_path):
    out = tmp_path / "clab"
    res = _cli("export", str(ROOT / "topologies/clos-3tier.yaml"), "-o", str(out), "--json")
    assert res.exit_code == 0, res.output
    first = json.loads(res.stdout)
    assert first["format"] == "containerlab" and Path(first["topology"]).is_file()
    assert (out / "configs/prefill1/host.sh").stat().st_mode & 0o111
    (out / "clab-clos-3tier").mkdir()  # what `containerlab deploy` leaves beside the file
    (out / "clab-clos-3tier/topology-data.json").write_text("{}")
    res = _cli("export", str(ROOT / "topologies/clos-2x4.yaml"), "-o", str(out))
    assert res.exit_code == 0, res.output
    assert "clos-2x4.clab.yml" in res.stdout
    assert not (out / "clos-3tier.clab.yml").exists() and (out / "clos-2x4.clab.yml").is_file()
    assert not (out / "configs/super1").exists()  # a node of the earlier lab only
    assert (out / "clab-clos-3tier/topology-data.json").exists()  # containerlab's: left alone


def test_a_foreign_directory_is_refused_untouched(tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    res = _cli("export", str(ROOT / "topologies/clos-2x4.yaml"), "-o", str(tmp_path))
    assert res.exit_code == ExitCode.ERROR and "(notes.txt) and not a rocelab export" in res.stderr
    assert res.stderr.startswith("rocelab: error: ") and res.stderr.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_foreign_file_inside_an_earlier_export_is_refused_untouched(tmp_path):
    assert _cli("export", str(ROOT / "topologies/clos-2x4.yaml"), "-o", str(tmp_path)).exit_code == 0
    (tmp_path / "configs/leaf1/notes.txt").write_text("mine\n")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(RocelabError, match="configs/leaf1/notes.txt"):
        export.earlier_export(tmp_path)
    res = _cli("export", str(ROOT / "topologies/l2-2x4.yaml"), "-o", str(tmp_path))
    assert res.exit_code == ExitCode.ERROR and "notes.txt" in res.stderr
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("args, code", [
    (["--format", "gns3"], ExitCode.USAGE),
    (["-o", "/proc/rocelab-export"], ExitCode.ERROR),
    (["--templates", "/nonexistent-templates"], ExitCode.USAGE),
])
def test_bad_arguments(args, code, tmp_path):
    argv = ["export", str(ROOT / "topologies/clos-2x4.yaml")] + args
    if "-o" not in args:
        argv += ["-o", str(tmp_path / "out")]
    res = _cli(*argv)
    assert res.exit_code == code, res.output
    assert res.stderr.startswith("rocelab: error: ") and res.stderr.count("\n") == 1


def test_the_render_it_exports_is_the_labs():
    """export reads render's integrated frr.conf and host.sh; nothing of its own in between."""
    _, plan, rendered = load_topology(ROOT / "topologies/rail-4x8.yaml")
    files = export.containerlab(plan, rendered).files
    for node in plan.nodes:
        if node.kind is Kind.HOST:
            assert files[f"configs/{node.name}/host.sh"] == render.host_script(plan, node)
        elif node in plan.frr_nodes:
            assert files[f"configs/{node.name}/frr.conf"] == rendered.files[node.name]["frr.conf"]


def test_what_is_left_behind_is_said(tmp_path):
    res = _cli("export", str(ROOT / "topologies/clos-2x4-cc.yaml"), "-o", str(tmp_path / "cc"))
    assert res.exit_code == 0 and "not exported: the congestion plane" in res.stdout, res.output
    _, plan, _ = load_topology(ROOT / "topologies/clos-2x4.yaml")
    assert export.left_behind(plan) == []
