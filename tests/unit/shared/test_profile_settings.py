"""Per-profile user data over the global settings: overrides, fallbacks, warnings (each bad value
once), limits."""

import logging

import pytest

from nm_scanguard import profile_settings
from nm_scanguard.config import Settings
from nm_scanguard.profile_settings import (MAX_PROBLEMS_PER_PROFILE, MAX_PROFILE_VALUE,
                                           ProfileWarnings, apply_profile)

# Every user-visible string is tried plain and with non-ASCII text.
NAMES = ["Cafe", "Café ☕"]
SHORT = 300  # a log line about a huge input must still be about one line long


@pytest.fixture(autouse=True)
def fresh_default_memo():
    """apply_profile's default memo is module state: keep tests from seeing each other's."""
    profile_settings.PROFILE_WARNINGS.clear()
    yield
    profile_settings.PROFILE_WARNINGS.clear()


def warnings_in(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


# ---- profile user data ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_profile_overrides_and_ignores_other_namespaces(name):
    s = apply_profile(Settings(), {"scanguard.threshold_mbit": "20", "other.key": "x" * 100_000}, name)
    assert s.threshold_mbit == 20 and s.source("threshold_mbit") == f"profile {name}"
    assert s.release_after == Settings().release_after


@pytest.mark.parametrize("name", NAMES)
def test_bad_profile_value_falls_back_with_warning(caplog, name):
    base = Settings(threshold_mbit=3.0, sources={"threshold_mbit": "/etc/x.conf"})
    with caplog.at_level(logging.WARNING):
        s = apply_profile(base, {"scanguard.threshold_mbit": "lots", "scanguard.enabled": "no"}, name)
    assert s.threshold_mbit == 3.0 and s.enabled is False
    msg = caplog.text
    assert f"NetworkManager profile '{name}'" in msg and "scanguard.threshold_mbit" in msg
    assert "'lots'" in msg and "from /etc/x.conf (3.0)" in msg


@pytest.mark.parametrize("name", NAMES)
def test_profile_roam_scans_overrides_the_file(caplog, name):
    base = Settings().with_values({"roam_scans": "targeted"}, "/etc/x.conf")
    with caplog.at_level(logging.WARNING):
        s = apply_profile(base, {"scanguard.roam_scans": " Full "}, name)
    assert s.roam_scans == "full" and s.source("roam_scans") == f"profile {name}"
    assert warnings_in(caplog) == []


@pytest.mark.parametrize("value", ["sometimes", "Café ☕"])
@pytest.mark.parametrize("name", NAMES)
def test_bad_profile_roam_scans_falls_back_to_the_file_with_a_warning(caplog, name, value):
    base = Settings().with_values({"roam_scans": "full"}, "/etc/x.conf")
    with caplog.at_level(logging.WARNING):
        s = apply_profile(base, {"scanguard.roam_scans": value}, name)
    assert s.roam_scans == "full" and s.source("roam_scans") == "/etc/x.conf"
    assert warnings_in(caplog) == [
        f"NetworkManager profile '{name}': user data scanguard.roam_scans: roam_scans = '{value}' "
        "is not valid; expected targeted or full; using the value from /etc/x.conf (full)"]


@pytest.mark.parametrize("name", NAMES)
def test_unknown_profile_key_warns_and_is_ignored(caplog, name):
    with caplog.at_level(logging.WARNING):
        s = apply_profile(Settings(), {"scanguard.treshold": "3", "scanguard.débit": "3"}, name)
    assert s == Settings() and "unknown key 'treshold'" in caplog.text
    assert "unknown key 'débit'" in caplog.text


@pytest.mark.parametrize("name", NAMES)
def test_inconsistent_profile_is_ignored_whole(caplog, name):
    with caplog.at_level(logging.WARNING):
        s = apply_profile(Settings(), {"scanguard.release_below_mbit": "50"}, name)
    assert s.release_below_mbit == Settings().release_below_mbit
    assert "ignoring this profile" in caplog.text and f"'{name}'" in caplog.text


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("unit", ["1", "☕"])
def test_overlong_profile_value_is_refused_with_a_short_warning(caplog, name, unit):
    value = unit * 100_000
    with caplog.at_level(logging.WARNING):
        s = apply_profile(Settings(), {"scanguard.threshold_mbit": value}, name)
    assert s.threshold_mbit == Settings().threshold_mbit
    [line] = warnings_in(caplog)
    assert len(line) < SHORT and "too long" in line and str(MAX_PROFILE_VALUE) in line
    assert f"'{name}'" in line and f"({len(value)} characters)" in line


def test_profile_value_length_cap_is_exact(caplog):
    at_cap = " " * (MAX_PROFILE_VALUE - 1) + "7"  # padding is stripped: a valid value of 7
    assert apply_profile(Settings(), {"scanguard.engage_after": at_cap}, "Café ☕").engage_after == 7
    with caplog.at_level(logging.WARNING):
        s = apply_profile(Settings(), {"scanguard.engage_after": " " + at_cap}, "Café ☕")
    assert s.engage_after == Settings().engage_after and "too long" in caplog.text


@pytest.mark.parametrize("name", NAMES)
def test_profile_warning_is_one_line_and_cut(caplog, name):
    with caplog.at_level(logging.WARNING):
        apply_profile(Settings(), {"scanguard.threshold_mbit": "5\nFAKE: all fine" + "µ" * 200}, name)
    [line] = warnings_in(caplog)
    assert "\n" not in line and "'5\\nFAKE: all fine" in line and len(line) < SHORT


def test_long_profile_name_is_cut_in_warnings(caplog):
    name = "Café ☕ " * 1000
    with caplog.at_level(logging.WARNING):
        apply_profile(Settings(), {"scanguard.enabled": "maybe"}, name)
    [line] = warnings_in(caplog)
    assert line.startswith("NetworkManager profile 'Café ☕ Café") and len(line) < SHORT


# ---- each bad profile value is warned about once -------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("first, second", [("lots", "heaps"), ("5µ", "6µ"), ("x" * 1000, "x" * 1001)])
def test_same_bad_value_warns_once_a_changed_one_again(caplog, name, first, second):
    memo = ProfileWarnings()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            apply_profile(Settings(), {"scanguard.threshold_mbit": first}, name, warned=memo)
        assert len(warnings_in(caplog)) == 1
        apply_profile(Settings(), {"scanguard.threshold_mbit": second}, name, warned=memo)
        apply_profile(Settings(), {"scanguard.threshold_mbit": second}, name, warned=memo)
    assert len(warnings_in(caplog)) == 2


def test_default_memo_also_warns_once(caplog):
    data = {"scanguard.threshold_mbit": "5µ"}
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            apply_profile(Settings(), data, "Café ☕")
    assert len(warnings_in(caplog)) == 1


def test_fixed_then_broken_again_is_warned_again(caplog):
    memo = ProfileWarnings()
    bad, good = {"scanguard.enabled": "peut-être"}, {"scanguard.enabled": "no"}
    with caplog.at_level(logging.WARNING):
        for data in (bad, bad, good, {}, bad):
            apply_profile(Settings(), data, "Café ☕", warned=memo)
    assert len(warnings_in(caplog)) == 2


def test_each_profile_and_key_is_remembered_apart(caplog):
    memo = ProfileWarnings()
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            for name in NAMES:
                apply_profile(Settings(), {"scanguard.enabled": "x", "scanguard.engage_after": "x"},
                              name, warned=memo)
    assert len(warnings_in(caplog)) == 2 * len(NAMES)


def test_inconsistent_profile_warns_once(caplog):
    memo = ProfileWarnings()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            apply_profile(Settings(), {"scanguard.release_below_mbit": "50"}, "Café ☕", warned=memo)
    assert len(warnings_in(caplog)) == 1 and "ignoring this profile" in caplog.text


def test_a_changed_fallback_is_warned_again(caplog):
    """After a reload the same bad value falls back to a different value: say so once more."""
    memo = ProfileWarnings()
    data = {"scanguard.threshold_mbit": "lots"}
    reloaded = Settings(threshold_mbit=7.0, sources={"threshold_mbit": "/etc/x.conf"})
    with caplog.at_level(logging.WARNING):
        for base in (Settings(), Settings(), reloaded, reloaded):
            apply_profile(base, data, "Café ☕", warned=memo)
    lines = warnings_in(caplog)
    assert len(lines) == 2 and "from /etc/x.conf (7.0)" in lines[1]


def test_many_bad_keys_of_one_profile_give_a_bounded_number_of_lines(caplog):
    memo = ProfileWarnings()
    extra = 40
    data = {f"scanguard.clé{i:03}": "x" for i in range(MAX_PROBLEMS_PER_PROFILE + extra)}
    with caplog.at_level(logging.WARNING):
        apply_profile(Settings(), data, "Café ☕", warned=memo)
        apply_profile(Settings(), data, "Café ☕", warned=memo)
    lines = warnings_in(caplog)
    assert len(lines) == MAX_PROBLEMS_PER_PROFILE + 1
    assert f"{extra} more bad scanguard.* user data keys" in lines[-1]


def test_memo_is_bounded_and_drops_the_oldest_profile(caplog):
    size = 8
    memo = ProfileWarnings(max_entries=size)
    data = {"scanguard.enabled": "x"}
    names = [f"Café ☕ {i}" for i in range(size + 1)]
    with caplog.at_level(logging.WARNING):
        for name in names:
            apply_profile(Settings(), data, name, warned=memo)
        assert len(memo) == size
        apply_profile(Settings(), data, names[-1], warned=memo)  # still remembered
        assert len(warnings_in(caplog)) == len(names)
        apply_profile(Settings(), data, names[0], warned=memo)  # dropped: warned once more
    assert len(warnings_in(caplog)) == len(names) + 1 and len(memo) == size


def test_good_profiles_leave_nothing_in_the_memo():
    memo = ProfileWarnings()
    for i in range(50):
        apply_profile(Settings(), {"scanguard.enabled": "no"}, f"Café ☕ {i}", warned=memo)
    assert len(memo) == 0
