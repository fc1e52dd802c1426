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


@pytest.mark.parametrize("text, bytes_", [("1.5K", 1500), ("1.5KiB", 1536), ("1.1K", 1100),
                                          ("1.001G", 1_001_000_000), ("1.0", 1), (4096, 4096)])
def test_fractional_sizes_that_are_whole_bytes_are_exact(text, bytes_):
    assert parse_size(text) == bytes_


@pytest.mark.parametrize("text", ["1.5", "0.5", "0.3KiB", "1.0001K", "0.0001"])
def test_a_size_that_is_not_a_whole_number_of_bytes_is_refused(text):
    # issue 24: `transfer --size 1.5` moved 1 byte
    with pytest.raises(UnitError, match=r"^--size: must be a whole number of bytes"):
        parse_size(text)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "1e400", 1e308, "1e9", 604801,
                                   "169h"])
def test_durations_are_finite_and_at_most_a_week(value):
    # .nan passed every comparison, 1e400 parsed as inf: sleeps and deadlines overflowed
    with pytest.raises(UnitError, match=r"^d: must be a finite duration of at most 7 days"):
        parse_duration(value, "d")


def test_a_week_in_hours_is_a_duration():
    assert parse_duration("168h") == parse_duration(604800) == 7 * 86400
    assert parse_duration("1.5h") == 5400
