"""Global file and per-profile user data: defaults, validation, messages, fallbacks."""

import logging

import pytest

from nm_scanguard.config import KEYS, ConfigError, Settings, apply_profile, load_file


def write(tmp_path, text):
    p = tmp_path / "scanguard.conf"
    p.write_text(text)
    return str(p)


def test_missing_file_means_defaults(tmp_path):
    s = load_file(str(tmp_path / "absent.conf"))
    assert s == Settings() and s.source("threshold_mbit") == "default"


def test_values_and_sources(tmp_path):
    path = write(tmp_path, "[scanguard]\nthreshold_mbit = 4.5  # comment\nenabled = no\nengage_after=2\n")
    s = load_file(path)
    assert (s.threshold_mbit, s.enabled, s.engage_after) == (4.5, False, 2)
    assert s.source("threshold_mbit") == path and s.source("release_after") == "default"


@pytest.mark.parametrize("text, words", [
    ("[scanguard]\nthreshold_mbit = fast\n", ["threshold_mbit = 'fast'", "Mbit/s"]),
    ("[scanguard]\nengage_after = 0\n", ["engage_after", "whole number"]),
    ("[scanguard]\nengage_after = 1.5\n", ["engage_after", "whole number"]),
    ("[scanguard]\nsignal_floor_dbm = 10\n", ["signal_floor_dbm", "dBm"]),
    ("[scanguard]\nenabled = maybe\n", ["enabled", "yes or no"]),
    ("[scanguard]\nthreshhold_mbit = 3\n", ["unknown key 'threshhold_mbit'", "threshold_mbit"]),
    ("[guard]\nthreshold_mbit = 3\n", ["unknown section [guard]", "[scanguard]"]),
    ("threshold_mbit = 3\n", ["not a valid INI file"]),
    ("[scanguard]\nthreshold_mbit = nan\n", ["threshold_mbit"]),
    ("[scanguard]\nthreshold_mbit = 1\nrelease_below_mbit = 2\n", ["release_below_mbit", "never release"]),
])
def test_bad_file_names_file_key_and_expected_form(tmp_path, text, words):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_file(path)
    assert path in str(e.value)
    for w in words:
        assert w in str(e.value)


def test_unreadable_file_is_an_error(tmp_path):
    d = tmp_path / "dir.conf"
    d.mkdir()
    with pytest.raises(ConfigError, match="cannot read"):
        load_file(str(d))


def test_every_key_documented_in_example_config():
    import pathlib
    example = pathlib.Path(__file__).parents[2] / "nm_scanguard" / "scanguard.conf"
    text = example.read_text()
    for key in KEYS:
        assert f"#{key} = " in text or f"# {key} = " in text, key
    # and the commented example parses to the defaults once uncommented
    uncommented = "\n".join(l[1:] if l.startswith("#") and " = " in l else l for l in text.splitlines())
    p = pathlib.Path("/tmp/scanguard-example-test.conf")
    p.write_text(uncommented)
    try:
        assert load_file(str(p)).values() == Settings().values()
    finally:
        p.unlink()


def test_profile_overrides_and_ignores_other_namespaces():
    s = apply_profile(Settings(), {"scanguard.threshold_mbit": "20", "other.key": "x"}, "Home")
    assert s.threshold_mbit == 20 and s.source("threshold_mbit") == "profile Home"
    assert s.release_after == Settings().release_after


def test_bad_profile_value_falls_back_with_warning(caplog):
    base = Settings(threshold_mbit=3.0, sources={"threshold_mbit": "/etc/x.conf"})
    with caplog.at_level(logging.WARNING):
        s = apply_profile(base, {"scanguard.threshold_mbit": "lots", "scanguard.enabled": "no"}, "Cafe")
    assert s.threshold_mbit == 3.0 and s.enabled is False
    msg = caplog.text
    assert "NetworkManager profile 'Cafe'" in msg and "scanguard.threshold_mbit" in msg
    assert "from /etc/x.conf (3.0)" in msg


def test_unknown_profile_key_warns_and_is_ignored(caplog):
    with caplog.at_level(logging.WARNING):
        s = apply_profile(Settings(), {"scanguard.treshold": "3"}, "Cafe")
    assert s == Settings() and "unknown key 'treshold'" in caplog.text


def test_inconsistent_profile_is_ignored_whole(caplog):
    with caplog.at_level(logging.WARNING):
        s = apply_profile(Settings(), {"scanguard.release_below_mbit": "50"}, "Cafe")
    assert s.release_below_mbit == Settings().release_below_mbit
    assert "ignoring this profile" in caplog.text
