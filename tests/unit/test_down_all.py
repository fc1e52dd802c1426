"""`down --all --prefix`: which labs it takes, decided without root or a lab."""

from __future__ import annotations

from emulator import lab, state


def test_down_all_takes_only_the_labs_under_the_prefix(monkeypatch):
    monkeypatch.setattr(lab, "require_root", lambda: None)
    monkeypatch.setattr(state, "known_labs", lambda: {"it-a", "it-b", "users-lab", "it"})
    downed: list[str] = []
    monkeypatch.setattr(lab, "down", lambda name, progress=None: downed.append(name) or name)
    assert lab.down_all("it-") == ["it-a", "it-b"] and downed == ["it-a", "it-b"]
    downed.clear()
    assert lab.down_all() == ["it", "it-a", "it-b", "users-lab"]  # no prefix: every lab
