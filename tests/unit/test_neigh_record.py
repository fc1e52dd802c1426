"""The neighbour-limit record (`up --raise-neigh-limit`, restored by the last `down`),
on a fake sysctl tree and a private run root: the real /proc/sys is never touched.

It is locked (two `up`s, or an `up` and the last `down`, never interleave their
read-modify-write), a corrupt record is kept aside and reported in one line (it used to
be read as "nothing raised" and deleted, leaving the limit raised for good), and restore
puts back only a value that is still the one rocelab wrote."""

from __future__ import annotations

import fcntl
import json
import os
from types import SimpleNamespace

import pytest

from emulator import neighbours, state
from emulator.errors import ExitCode, HostLimitError

DEFAULTS = {"gc_thresh3": 1024, "gc_thresh2": 512}


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A fake /proc/sys with the kernel's defaults; no lab running; 2,000 IPv4 entries needed."""
    for fam in neighbours.FAMILIES:
        d = tmp_path / "sys" / "net" / fam / "neigh" / "default"
        d.mkdir(parents=True)
        for key, value in DEFAULTS.items():
            (d / key).write_text(f"{value}\n")
    monkeypatch.setattr(neighbours, "SYSCTL", str(tmp_path / "sys/net/{family}/neigh/default/gc_thresh3"))
    monkeypatch.setattr(neighbours, "RUN_ROOT", tmp_path / "run")
    monkeypatch.setattr(neighbours, "in_use", lambda: {"ipv4": 0, "ipv6": 0})
    monkeypatch.setattr(neighbours, "needed", lambda plan: {"ipv4": 2000, "ipv6": 0})
    monkeypatch.setattr(state, "known_labs", lambda: set())
    assert not neighbours.SYSCTL.startswith("/proc")
    return tmp_path / "sys" / "net"


def value(host, fam: str, key: str) -> int:
    return int((host / fam / "neigh" / "default" / key).read_text())


def test_raise_then_restore_puts_the_originals_back(host):
    assert neighbours.raise_for(None) == {"ipv4": 2501}  # type: ignore[arg-type]
    assert (value(host, "ipv4", "gc_thresh3"), value(host, "ipv4", "gc_thresh2")) == (2501, 1250)
    record = json.loads(neighbours.record_path().read_text())
    assert record == {"ipv4": DEFAULTS | {"set": {"gc_thresh3": 2501, "gc_thresh2": 1250}}}
    assert neighbours.restore_if_idle() == []
    assert (value(host, "ipv4", "gc_thresh3"), value(host, "ipv4", "gc_thresh2")) == (1024, 512)
    assert not neighbours.record_path().exists()


def test_a_value_an_administrator_changed_since_is_left_and_said(host):
    neighbours.raise_for(None)  # type: ignore[arg-type]
    (host / "ipv4/neigh/default/gc_thresh3").write_text("8192\n")  # the admin, later
    notes = neighbours.restore_if_idle()
    assert notes == ["net.ipv4.neigh.default.gc_thresh3 is 8192, not the 2501 rocelab set: "
                     "changed since, so left as it is (it was 1024 before)"]
    assert value(host, "ipv4", "gc_thresh3") == 8192  # the admin's
    assert value(host, "ipv4", "gc_thresh2") == 512  # untouched since: ours to put back
    assert not neighbours.record_path().exists()


def test_a_corrupt_record_is_kept_aside_and_reported_on_restore(host):
    neighbours.raise_for(None)  # type: ignore[arg-type]
    neighbours.record_path().write_text('{"ipv4": {"gc_thresh3": "many"')  # torn, or edited
    notes = neighbours.restore_if_idle()
    assert len(notes) == 1 and "\n" not in notes[0]
    aside = neighbours.record_path().with_suffix(".json.corrupt")
    assert notes[0].startswith(f"the neighbour-limit record {neighbours.record_path()} is corrupt")
    assert f"kept as {aside}, nothing restored" in notes[0] and "2501/1024" in notes[0]
    assert aside.read_text() == '{"ipv4": {"gc_thresh3": "many"'
    assert value(host, "ipv4", "gc_thresh3") == 2501  # not guessed at


@pytest.mark.parametrize("text", ["[]", '{"ipv5": {}}', '{"ipv4": {"gc_thresh3": 1}}',
                                  '{"ipv4": {"gc_thresh3": 1, "gc_thresh2": 1, "set": 3}}'])
def test_a_record_of_the_wrong_shape_is_corrupt_and_up_refuses(host, text):
    neighbours.record_path().parent.mkdir(parents=True)
    neighbours.record_path().write_text(text)
    with pytest.raises(HostLimitError) as err:
        neighbours.raise_for(None)  # type: ignore[arg-type]
    assert err.value.exit_code == ExitCode.HOST_LIMIT and "is corrupt" in str(err.value)
    assert value(host, "ipv4", "gc_thresh3") == 1024  # nothing raised on an unknown original
    assert neighbours.record_path().with_suffix(".json.corrupt").exists()


def test_the_record_is_changed_only_under_its_lock(host, monkeypatch):
    held = []
    real_save = neighbours._save

    def save(record) -> None:  # while raise_for writes the record, a second opener must wait
        other = os.open(neighbours._lock_path(), os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)
        held.append(True)
        real_save(record)
    monkeypatch.setattr(neighbours, "_save", save)
    neighbours.raise_for(None)  # type: ignore[arg-type]
    assert held
    other = os.open(neighbours._lock_path(), os.O_RDONLY)  # and released after
    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(other)


def test_an_older_record_without_the_written_values_restores_as_before(host):
    (host / "ipv4/neigh/default/gc_thresh3").write_text("3000\n")
    neighbours.record_path().parent.mkdir(parents=True)
    neighbours.record_path().write_text(json.dumps({"ipv4": DEFAULTS}))
    assert neighbours.restore() == []
    assert value(host, "ipv4", "gc_thresh3") == 1024


def test_without_a_record_down_does_not_look_for_other_labs(host, monkeypatch):
    def asked():
        raise AssertionError("known_labs scans every namespace and process on the machine")
    monkeypatch.setattr(state, "known_labs", asked)
    assert not neighbours.record_path().exists()
    assert neighbours.restore_if_idle() == []


def test_a_lab_that_needs_no_entries_is_not_refused_for_a_table_others_filled(host, monkeypatch):
    """A routed lab pins every neighbour it uses: it needed 0 entries and was refused
    ("needs 0 IPv6 neighbour entries and 1562 are in use") because another lab's had
    filled the table past the limit."""
    monkeypatch.setattr(neighbours, "in_use", lambda: {"ipv4": 0, "ipv6": 1562})
    monkeypatch.setattr(neighbours, "needed", lambda plan: {"ipv4": 0, "ipv6": 0})
    plan = SimpleNamespace(lab="lab1")
    neighbours.check(plan)  # type: ignore[arg-type]
    monkeypatch.setattr(neighbours, "needed", lambda plan: {"ipv4": 0, "ipv6": 1})
    with pytest.raises(HostLimitError, match="needs 1 IPv6 neighbour entries and 1562 are in use"):
        neighbours.check(plan)  # type: ignore[arg-type]
