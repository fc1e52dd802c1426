"""An action or a flow held until a flow's progress (`once_sent`): checked when the file
is read, and the wait on the flow's bytes (docs/congestion.md)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from emulator.cli import main
from emulator.experiment.action_spec import OnceSent
from emulator.experiment.actions import Timeline, await_sent
from emulator.experiment.spec import Action, load

ROOT = Path(__file__).resolve().parents[2]


def _exp(tmp_path: Path, once_sent: dict) -> Path:
    return _written(tmp_path, [F], [{"at": "1s", "once_sent": once_sent,
                                     "fault": {"fail": "link", "a": "leaf1", "b": "spine1"}}])


F = {"name": "f", "src": "prefill1", "dst": "decode1", "size": "64MiB"}


def _written(tmp_path: Path, flows: list[dict], actions: list[dict]) -> Path:
    """An experiment on clos-2x4 with these flows and actions, as a file."""
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "topology": str(ROOT / "topologies/clos-2x4.yaml"),
                                    "flows": flows, "actions": actions}))
    return path


@pytest.mark.parametrize(("once_sent", "word"), [
    ({"flow": "g", "bytes": "1MiB"}, "once_sent: no flow 'g'; flows: f"),
    ({"flow": "f", "bytes": "lots"}, "once_sent.bytes"),
    ({"flow": "f"}, "once_sent.bytes"),
])
def test_a_bad_once_sent_is_refused_when_read(tmp_path, once_sent, word):
    _refused(_exp(tmp_path, once_sent), word)


def _refused(path: Path, word: str) -> None:
    """`rocelab check` refuses `path` with one line that names `word`."""
    res = CliRunner().invoke(main, ["check", str(path)])
    assert res.exit_code != 0 and len(res.stderr.splitlines()) == 1, res.stderr
    assert word in res.stderr


def test_the_shipped_failure_comparison_holds_its_faults_on_its_flows():
    res = CliRunner().invoke(main, ["check", str(ROOT / "experiments/mrc-vs-rc-failure.yaml")])
    assert res.exit_code == 0, res.output


def _held(sent, deadline_in: float) -> tuple[bool, float]:
    action = Action.model_validate({"at": 0, "fault": {"fail": "link", "a": "leaf1", "b": "spine1"},
                                    "once_sent": {"flow": "f", "bytes": "1MiB"}})
    t = Timeline(None, [action], time.monotonic(), time.monotonic() + deadline_in, sent=sent)  # type: ignore[arg-type]
    t0 = time.monotonic()
    late = t._await_sent(action)
    return late, time.monotonic() - t0


def test_an_action_waits_for_its_flows_bytes():
    progress = iter([0, 0, 512 << 10, 1 << 20] + [1 << 20] * 100)
    asked: list[str] = []

    def sent(name: str) -> int:
        asked.append(name)
        return next(progress)

    late, _ = _held(sent, 60.0)
    assert not late and asked == ["f"] * 4  # held until 1 MiB, not a poll longer


def test_an_action_whose_flow_never_gets_there_runs_late_at_the_end():
    late, waited = _held(lambda name: 0, 0.1)
    assert late and waited >= 0.1


def _flows_exp(tmp_path: Path, once_sent: dict) -> Path:
    return _written(tmp_path, [F, {"name": "h", "src": "prefill2", "dst": "decode2",
                                   "size": "1MiB", "once_sent": once_sent}], [])


@pytest.mark.parametrize(("once_sent", "word"), [
    ({"flow": "g", "bytes": "1MiB"}, "once_sent: 'g' is not another flow; flows: f, h"),
    ({"flow": "h", "bytes": "1MiB"}, "once_sent: 'h' is not another flow"),
    ({"flow": "f", "bytes": "lots"}, "once_sent.bytes"),
])
def test_a_flows_bad_once_sent_is_refused_when_read(tmp_path, once_sent, word):
    _refused(_flows_exp(tmp_path, once_sent), word)


def test_the_congested_spine_handoffs_wait_for_the_traffic_they_meet():
    res = CliRunner().invoke(main, ["check", str(ROOT / "experiments/diagnose/congested-spine.yaml")])
    assert res.exit_code == 0, res.output
    flows = {f.name: f for f in load(ROOT / "experiments/diagnose/congested-spine.yaml")[0].flows}
    assert flows["via-spine1"].once_sent.flow == "bulk1"  # type: ignore[union-attr]
    assert flows["via-spine2"].once_sent.flow == "via-spine1"  # type: ignore[union-attr]


def test_a_held_flow_waits_for_the_other_flows_bytes_and_a_halt_ends_the_wait():
    need = OnceSent(flow="bulk", bytes="1MiB")
    progress = iter([0, 256 << 10, 1 << 20])
    assert await_sent(lambda name: next(progress), need, time.monotonic() + 60, threading.Event()) is False
    halt = threading.Event()
    halt.set()
    t = time.monotonic()
    assert await_sent(lambda name: 0, need, time.monotonic() + 60, halt) is False
    assert time.monotonic() - t < 1
    assert await_sent(lambda name: 0, need, time.monotonic() + 0.05, threading.Event()) is True
