"""The pytest plugin's decisions that need no lab: when to skip, and what counts as left over."""

from __future__ import annotations

import pytest

from emulator import pytest_plugin


def test_without_root_labs_are_skipped_saying_why(monkeypatch):
    monkeypatch.setattr(pytest_plugin.os, "geteuid", lambda: 1000)
    assert pytest_plugin.missing_requirement() == "rocelab labs need root (network namespaces, FRR)"
    with pytest.raises(pytest.skip.Exception, match="need root"):
        pytest_plugin.LabFactory()("topologies/clos-2x4.yaml")


def test_without_frr_labs_are_skipped_saying_why(monkeypatch, tmp_path):
    monkeypatch.setattr(pytest_plugin.os, "geteuid", lambda: 0)
    monkeypatch.setattr(pytest_plugin, "FRR_ZEBRA", tmp_path / "zebra")
    assert "FRR is not installed" in pytest_plugin.missing_requirement()


def test_an_empty_factory_closes_quietly():
    pytest_plugin.LabFactory().close()  # nothing up, nothing leaked: no failure


def test_the_plugin_is_registered_for_pytest():
    from importlib.metadata import entry_points

    plugins = {e.name: e.value for e in entry_points(group="pytest11")}
    assert plugins.get("rocelab") == "emulator.pytest_plugin"
