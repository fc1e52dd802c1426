"""The experiment action `vtysh: {node, commands}`, checked when the file is read."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
def test_the_vtysh_action_takes_a_list_or_one_string():
    from emulator.experiment.spec import Action

    a = Action.model_validate({"at": "1s", "vtysh": {"node": "spine1", "commands": [
        "configure terminal", "router bgp 65000", "bgp graceful-shutdown"]}})
    assert a.kind == "vtysh" and a.args["commands"][2] == "bgp graceful-shutdown"
    b = Action.model_validate({"at": 1, "vtysh": {"node": "spine1",
                                                  "commands": "configure terminal\nrouter bgp 65000\n"}})
    assert b.args == {"node": "spine1", "commands": ["configure terminal", "router bgp 65000"]}
    for bad in ([], [""], "", [1]):
        with pytest.raises(ValueError):
            Action.model_validate({"at": 1, "vtysh": {"node": "spine1", "commands": bad}})


def test_a_vtysh_action_on_a_node_without_frr_is_refused_when_read(tmp_path):
    import yaml
    from click.testing import CliRunner

    from emulator.cli import main

    exp = {"name": "x", "topology": str(ROOT / "topologies/clos-2x4.yaml"),
           "flows": [{"name": "f", "src": "prefill1", "dst": "decode1", "size": "1MiB"}],
           "actions": [{"at": "1s", "vtysh": {"node": "prefill1", "commands": ["show version"]}}]}
    (tmp_path / "e.yaml").write_text(yaml.safe_dump(exp))
    res = CliRunner().invoke(main, ["check", str(tmp_path / "e.yaml")])
    assert res.exit_code != 0 and len(res.stderr.splitlines()) == 1
    assert "actions.0.vtysh.node: no router running FRR named 'prefill1'" in res.stderr
    exp["actions"][0]["vtysh"]["node"] = "spine2"
    (tmp_path / "e.yaml").write_text(yaml.safe_dump(exp))
    assert CliRunner().invoke(main, ["check", str(tmp_path / "e.yaml")]).exit_code == 0


def test_the_drain_vs_fail_experiment_checks():
    from click.testing import CliRunner

    from emulator.cli import main

    res = CliRunner().invoke(main, ["check", str(ROOT / "experiments/drain-vs-fail.yaml")])
    assert res.exit_code == 0, res.output
