"""One grammar each for sizes, speeds and durations (emulator/units.py)."""

from __future__ import annotations

import pytest

from emulator.errors import RocelabError
from emulator.units import UnitError, parse_duration, parse_size, parse_speed, speed_or_zero


@pytest.mark.parametrize("text, size", [("64MiB", 64 << 20), ("150KB", 150_000), ("4096", 4096),
                                        (4096, 4096), ("1.5 KiB", 1536), ("2G", 2 * 10**9)])
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text, bps", [("400G", 400 * 10**9), ("100M", 10**8),
                                       ("25000Mbit", 25 * 10**9), (" 1.5T ", 1.5e12)])
def test_speeds(text, bps):
    assert parse_speed(text) == bps
    assert speed_or_zero(text) == bps


@pytest.mark.parametrize("text, seconds", [("300us", 3e-4), ("4µs", 4e-6), ("1.5ms", 1.5e-3),
                                           ("2s", 2.0), ("1m", 60.0), ("0.5", 0.5), (3, 3.0),
                                           ("250ns", 2.5e-7), ("0", 0.0), ("1e-3", 1e-3)])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("call, message", [
    (lambda: parse_size("lots", "ecn.kmin"), "ecn.kmin: 'lots' is not a size like 64MiB"),
    (lambda: parse_size("0KB"), "--size: must be positive"),
    (lambda: parse_speed("fast", "--rate"), "--rate: 'fast' is not a rate like 100G"),
    (lambda: parse_speed("0G"), "speed: must be greater than zero"),
    (lambda: parse_duration("soon", "at"), "at: 'soon' is not a duration like 300us"),
    (lambda: parse_duration(-1, "at"), "at: must be zero or more"),
    (lambda: parse_duration("0s", "--period", positive=True), "--period: must be positive"),
])
def test_errors_name_the_field_and_what_is_allowed(call, message):
    with pytest.raises(UnitError) as err:
        call()
    assert str(err.value).startswith(message)
    assert isinstance(err.value, RocelabError) and isinstance(err.value, ValueError)
    assert "\n" not in str(err.value)


def test_speed_or_zero_is_zero_for_anything_not_a_positive_speed():
    assert speed_or_zero("fast") == speed_or_zero("0G") == speed_or_zero("") == 0


@pytest.mark.parametrize("parse, text", [
    (parse_size, "9" * 400 + "KiB"), (parse_size, "2TiB"),
    (parse_speed, "9" * 400 + "G"), (parse_speed, "100T"),
])
def test_huge_quantities_are_one_line_errors_not_overflows(parse, text):
    if text == "2TiB":  # large but fine: below the 1 PiB bound
        assert parse(text) == 2 * 1024**4
        return
    with pytest.raises(UnitError) as e:
        parse(text)
    assert "below" in str(e.value) and len(str(e.value)) < 100
