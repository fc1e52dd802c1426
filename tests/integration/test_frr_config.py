"""Your own FRR configuration on real labs: a snippet that changes the FIB, templates,
a configuration FRR refuses (and the rollback), `save` then `up` of the saved configs,
and the experiment action `vtysh`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from emulator import lab as lab_mod
from emulator import state

from .conftest import PREFIX, Lab, cli, leftovers, poll

ROOT = Path(__file__).resolve().parents[2]
SNIPPET = """\
ip prefix-list LEAF1-HOSTS seq 10 permit 10.2.0.0/24 le 32
route-map TO-SPINE2 deny 10
 match ip address prefix-list LEAF1-HOSTS
exit
route-map TO-SPINE2 permit 20
exit
router bgp 65101
 address-family ipv4 unicast
  neighbor spine2 route-map TO-SPINE2 out
 exit-address-family
exit
"""
LEAF1_HOSTS = ["10.2.0.0/31", "10.2.0.2/31"]  # prefill1, prefill2


def topology(tmp: Path, name: str, **extra) -> Path:
    data = {"name": name, "spines": 2, "leaves": 4} | extra
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def routes(lab_name: str, node: str) -> list[str]:
    """`ip -4 route` in a node's namespace, one line per route (next hops folded in)."""
    out = subprocess.run(["ip", "-n", f"{lab_name}-{node}", "-4", "-o", "route", "show"],
                         capture_output=True, text=True, check=True).stdout
    return sorted(" ".join(line.replace("\\", " ").split()) for line in out.splitlines())


def width(lab_name: str, node: str, prefix: str) -> int:
    for line in routes(lab_name, node):
        if line.startswith(prefix + " "):
            return max(1, line.count("nexthop via"))
    return 0


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("templates")
    shipped = (ROOT / "frr-templates" / "bgpd.conf.j2").read_text()
    (d / "bgpd.conf.j2").write_text(shipped.replace(" coalesce-time 0\n", " coalesce-time 7\n"))
    return d


@pytest.fixture(scope="module")
def policy(tmp_path_factory, templates):
    """clos-2x4 with leaf1 keeping its hosts from spine2, up with user templates."""
    name = f"{PREFIX}frr"
    lab = Lab(str(topology(tmp_path_factory.mktemp("policy"), name,
                           overrides={"leaf1": {"frr": SNIPPET}})), name)
    try:
        lab.up("--templates", str(templates))
        yield lab
    finally:
        cli("down", name, check=False)


def test_a_snippet_changes_the_fib_as_its_policy_says(policy):
    for leaf in ("leaf2", "leaf3", "leaf4"):  # leaf1's hosts: through spine1 only
        for prefix in LEAF1_HOSTS:
            assert width(policy.name, leaf, prefix) == 1, routes(policy.name, leaf)
        assert "dev spine1" in next(r for r in routes(policy.name, leaf)
                                    if r.startswith(LEAF1_HOSTS[0]))
        other = "10.2.2.0/31" if leaf != "leaf3" else "10.2.1.0/31"  # another leaf's host
        assert width(policy.name, leaf, other) == 2  # the others' hosts: both spines
    assert all(width(policy.name, "spine2", p) == 0 for p in LEAF1_HOSTS)  # withheld from spine2
    assert all(width(policy.name, "spine1", p) == 1 for p in LEAF1_HOSTS)
    assert width(policy.name, "leaf1", "10.2.2.0/31") == 2  # what leaf1 learns is untouched
    ping = policy.exec("decode4", "ping", "-c", "1", "-W", "2", "10.2.0.1", check=False)
    assert ping.returncode == 0, ping.stdout  # the hosts still reach each other
    # the snippet is in the run dir, next to the files the daemons started with
    run_dir = Path(f"/run/rocelab/{policy.name}/leaf1")
    assert (run_dir / "overrides.conf").read_text() == SNIPPET
    assert "neighbor spine2 route-map TO-SPINE2 out" in (run_dir / "frr.conf").read_text()


def test_status_list_fail_and_heal_accept_the_users_policy(policy):
    st = policy.status()  # the plan would want width 2 toward leaf1's hosts: the policy says 1
    assert st["user_config"] and st["converged"] and st["healthy"], st
    rows = json.loads(cli("list", "--json").stdout)
    assert next(r["health"] for r in rows if r["name"] == policy.name) == "healthy"
    cli("validate", policy.name, "--check", "fib,bgp,reach")  # exit 0: the policy's widths pass
    out = cli("fail", policy.name, "link", "leaf2", "spine1", "--json")  # settles, not a timeout
    assert json.loads(out.stdout)["convergence"]["settled"]
    assert width(policy.name, "leaf2", LEAF1_HOSTS[0]) == 0  # spine1 was its only way there
    cli("heal", policy.name, "--all")
    assert width(policy.name, "leaf2", LEAF1_HOSTS[0]) == 1


def test_a_session_the_user_shuts_is_expected_down(tmp_path):
    name = f"{PREFIX}shut"
    shut = "router bgp 65101\n neighbor spine2 shutdown\nexit\n"
    lab = Lab(str(topology(tmp_path, name, overrides={"leaf1": {"frr": shut}})), name)
    try:
        lab.up()  # would time out if the bgp check wanted leaf1-spine2 Established
        assert width(name, "leaf2", LEAF1_HOSTS[0]) == 1
        st = lab.status()
        assert st["converged"] and st["healthy"], st  # shut on purpose: not a missing session
        leaf1 = next(r for r in st["routers"] if r["node"] == "leaf1")
        assert (leaf1["sessions_up"], leaf1["sessions_configured"]) == (1, 1)
        cli("validate", name, "--check", "bgp")
    finally:
        cli("down", name, check=False)


def test_templates_are_used_and_recorded_with_the_lab(policy, templates):
    running = cli("vtysh", policy.name, "spine1", "-c", "show running-config").stdout
    assert " coalesce-time 7\n" in running
    assert state.read(policy.name)["templates"] == str(templates.resolve())
    plan, rendered = lab_mod.rendered_lab(policy.name)  # what export and the like start from
    assert " coalesce-time 7\n" in rendered.files["leaf3"]["frr.conf"]
    assert rendered.user["leaf1"][0].text == SNIPPET


def _action_experiment(tmp: Path, lab_name: str) -> Path:
    exp = {"name": "vtysh-action", "topology": str(ROOT / "topologies/clos-2x4.yaml"),
           "lab": lab_name, "duration": "20s",
           "flows": [{"name": "kv", "src": "prefill3", "dst": "decode1", "size": "4MiB",
                      "repeat": 4}],
           "actions": [{"at": "0.2s", "vtysh": {"node": "spine1", "commands": [
               "configure terminal", "router bgp 65000", "bgp graceful-shutdown"]}},
               {"at": "0.3s", "vtysh": {"node": "leaf2", "commands": "show bgp summary\n"}},
               {"at": "0.4s", "vtysh": {"node": "leaf3", "commands": ["show no-such-thing"]}}]}
    path = tmp / "exp.yaml"
    path.write_text(yaml.safe_dump(exp, sort_keys=False))
    return path


def test_the_vtysh_action_runs_on_the_timeline(policy, tmp_path):
    exp = _action_experiment(tmp_path, policy.name)
    cli("run", str(exp), "--out", str(tmp_path / "out"), timeout=180)  # the running lab: kept up
    r = json.loads((tmp_path / "out" / "results.json").read_text())
    assert r["integrity_ok"]
    drain, summary, bad = r["events"]
    assert drain["kind"] == "vtysh" and drain["node"] == "spine1" and "error" not in drain
    # due at 0.2 s of a 20 s run: done within the run's first quarter (not "< 1 s", which is
    # the machine's speed: vtysh alone takes ~0.3 s on a loaded two-core machine)
    assert drain["commands"][-1] == "bgp graceful-shutdown" and 0.2 <= drain["t_s"] < 20 / 4
    assert "Neighbor" in summary["output"]  # what vtysh printed
    assert "no-such-thing" in bad["error"] or "Unknown command" in bad["error"]
    # graceful shutdown stays: the leaves give spine1's paths local-pref 0
    poll(lambda: width(policy.name, "leaf2", "10.2.2.0/31") == 1, 10, what="leaf2 off spine1")
    assert "dev spine2" in next(r for r in routes(policy.name, "leaf2") if r.startswith("10.2.2.0/31"))
    cli("vtysh", policy.name, "spine1", "-c", "configure terminal", "-c", "router bgp 65000",
        "-c", "no bgp graceful-shutdown")
    poll(lambda: width(policy.name, "leaf2", "10.2.2.0/31") == 2, 10, what="leaf2 back on spine1")


def test_save_then_up_gives_every_router_the_same_fib(policy, tmp_path):
    # a live edit save must keep: leaf4 makes its hosts look far away through spine1
    cli("vtysh", policy.name, "leaf4", "-c", "configure terminal",
        "-c", "route-map LONGER permit 10", "-c", "set as-path prepend 65104 65104",
        "-c", "router bgp 65104", "-c", "address-family ipv4 unicast",
        "-c", "neighbor spine1 route-map LONGER out")
    poll(lambda: width(policy.name, "leaf1", "10.2.3.0/31") == 1, 15, what="the prepend in the FIB")
    saved = tmp_path / "saved"
    res = json.loads(cli("save", policy.name, "-o", str(saved), "--json").stdout)
    assert sorted(res["routers"]) == sorted(n.name for n in policy.plan.routers)
    topo = yaml.safe_load((saved / "topology.yaml").read_text())
    assert topo["frr_configs"] == "." and "overrides" not in topo
    assert "set as-path prepend 65104 65104" in (saved / "leaf4" / "frr.conf").read_text()
    again = f"{PREFIX}frr-saved"
    try:
        cli("up", str(saved / "topology.yaml"), "--name", again)
        for node in policy.plan.routers:
            poll(lambda n=node.name: routes(again, n) == routes(policy.name, n), 15,
                 what=f"{node.name}: the rebuilt lab's FIB equal to the original's")
        assert width(again, "leaf1", "10.2.3.0/31") == 1 and width(again, "spine2", LEAF1_HOSTS[0]) == 0
    finally:
        cli("down", again, check=False)
    # saving again replaces the earlier save; a foreign directory is refused, untouched
    cli("save", policy.name, "-o", str(saved))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine\n")
    res = cli("save", policy.name, "-o", str(tmp_path / "mine"), check=False)
    assert res.returncode == 1 and "not a rocelab save" in res.stderr
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("snippet, code, message", [
    ("ip prefix-list P seq 10 permit 10.2.0.0/24 le 32\nroute-map X permt 10\n", 2,
     'leaf1: FRR rejected line 2 of the overrides frr snippet: "route-map X permt 10": '
     "% Unknown command"),
    ("route-map X permit 10\nexit\nrouter bgp 65101\n neighbor nosuch route-map X out\nexit\n", 5,
     'leaf1: FRR rejected line 4 of the overrides frr snippet: "neighbor nosuch route-map X out": '
     "% Specify remote-as or peer-group commands first"),
], ids=["unknown-command", "refused-by-bgpd"])
def test_a_refused_snippet_fails_up_and_leaves_nothing(tmp_path, snippet, code, message):
    name = f"{PREFIX}frr-bad"
    path = topology(tmp_path, name, leaves=2, overrides={"leaf1": {"frr": snippet}})
    res = cli("up", str(path), check=False)
    assert res.returncode == code, res.stderr
    assert res.stderr.strip().splitlines()[-1] == f"rocelab: error: {message}"
    assert not leftovers(name), leftovers(name)  # no namespace, process or run dir


def test_a_refused_frr_configs_file_names_the_file_and_rolls_back(tmp_path):
    name = f"{PREFIX}frr-file"
    (tmp_path / "c" / "spine2").mkdir(parents=True)
    conf = tmp_path / "c" / "spine2" / "frr.conf"
    conf.write_text("frr version 8.4.4\nhostname spine2\n!\nrouter bgp 65000\n"
                    " neighbor leaf9 route-map X in\nexit\n!\nend\n")
    path = topology(tmp_path, name, leaves=2, frr_configs="c")
    res = cli("up", str(path), check=False)
    assert res.returncode == 5, res.stderr
    assert f'spine2: FRR rejected line 5 of {conf}: "neighbor leaf9 route-map X in"' in res.stderr
    assert not leftovers(name), leftovers(name)
