"""The global file: defaults, validation, messages, limits (per-profile user data:
test_profile_settings.py)."""

import os
import pathlib
import threading

import pytest

from nm_scanguard import config
from nm_scanguard.config import (KEYS, MAX_FILE_BYTES, ConfigError, Settings, clipped, load_file,
                                 parse_value, quoted)

# Every user-visible string is tried plain and with non-ASCII text.
NAMES = ["Cafe", "Café ☕"]
SHORT = 300  # an error or log line about a huge input must still be about one line long


@pytest.fixture(params=["plain", "Café ☕"])
def conf_dir(tmp_path, request):
    """A directory for config files, once with an ASCII and once with a non-ASCII name."""
    d = tmp_path / request.param
    d.mkdir()
    return d


def write(d, text, name="scanguard.conf"):
    p = d / name
    p.write_text(text, encoding="utf-8")
    return str(p)


# ---- the global file ------------------------------------------------------------------------------

def test_missing_file_means_defaults(conf_dir):
    s = load_file(str(conf_dir / "absent.conf"))
    assert s == Settings() and s.source("threshold_mbit") == "default"


def test_dangling_symlink_means_defaults_like_a_missing_file(conf_dir):
    link = conf_dir / "scanguard.conf"
    link.symlink_to(conf_dir / "nowhere.conf")
    assert load_file(str(link)) == Settings()


def test_values_and_sources(conf_dir):
    path = write(conf_dir, "[scanguard]\nthreshold_mbit = 4.5  # comment\nenabled = no\nengage_after=2\n")
    s = load_file(path)
    assert (s.threshold_mbit, s.enabled, s.engage_after) == (4.5, False, 2)
    assert s.source("threshold_mbit") == path and s.source("release_after") == "default"


def test_a_utf8_byte_order_mark_is_not_part_of_the_text(conf_dir):
    p = conf_dir / "scanguard.conf"
    p.write_bytes("\ufeff[scanguard]\n# Café ☕\nenabled = no\n".encode("utf-8"))
    assert load_file(str(p)).enabled is False


@pytest.mark.parametrize("text, words", [
    ("[scanguard]\nthreshold_mbit = fast\n", ["threshold_mbit = 'fast'", "Mbit/s"]),
    ("[scanguard]\nthreshold_mbit = Café ☕\n", ["threshold_mbit = 'Café ☕'", "Mbit/s"]),
    ("[scanguard]\nthreshold_mbit = 5µ\n", ["threshold_mbit = '5µ'", "Mbit/s"]),
    ("[scanguard]\nengage_after = 0\n", ["engage_after", "whole number"]),
    ("[scanguard]\nengage_after = 1.5\n", ["engage_after = '1.5'", "whole number"]),
    ("[scanguard]\nsignal_floor_dbm = 10\n", ["signal_floor_dbm", "dBm"]),
    ("[scanguard]\nenabled = maybe\n", ["enabled", "yes or no"]),
    ("[scanguard]\nenabled = peut-être ☕\n", ["enabled = 'peut-être ☕'", "yes or no"]),
    ("[scanguard]\nroam_scans = some\n", ["roam_scans = 'some'", "targeted or full"]),
    ("[scanguard]\nroam_scans = Café ☕\n", ["roam_scans = 'Café ☕'", "targeted or full"]),
    ("[scanguard]\nthreshhold_mbit = 3\n", ["unknown key 'threshhold_mbit'", "threshold_mbit"]),
    ("[scanguard]\nseuil_débit = 3\n", ["unknown key 'seuil_débit'", "threshold_mbit"]),
    ("[guard]\nthreshold_mbit = 3\n", ["unknown section [guard]", "[scanguard]"]),
    ("[garde ☕]\nthreshold_mbit = 3\n", ["unknown section [garde ☕]", "[scanguard]"]),
    ("[DEFAULT]\nenabled = no\n[scanguard]\n", ["unknown section [DEFAULT]", "[scanguard]"]),
    ("threshold_mbit = 3\n", ["not a valid INI file", "line 1", "[scanguard]"]),
    ("# Café ☕\n\nseuil = 3\n", ["not a valid INI file", "line 3", "[scanguard]"]),
    ("[scanguard]\nthreshold_mbit = nan\n", ["threshold_mbit = 'nan'"]),
    ("[scanguard]\nthreshold_mbit = 1\nrelease_below_mbit = 2\n", ["release_below_mbit", "never release"]),
])
def test_bad_file_names_file_key_and_expected_form(conf_dir, text, words):
    path = write(conf_dir, text)
    with pytest.raises(ConfigError) as e:
        load_file(path)
    assert path in str(e.value)
    for w in words:
        assert w in str(e.value)


def test_lines_that_are_not_settings_are_named_by_number(conf_dir):
    path = write(conf_dir, "[scanguard]\nenabled = yes\njunk ☕\n# fine\nmore junk\n")
    with pytest.raises(ConfigError) as e:
        load_file(path)
    assert "lines 3, 5" in str(e.value) and "junk" not in str(e.value).replace(path, "")


def test_a_key_set_twice_is_named_with_its_line(conf_dir):
    path = write(conf_dir, "[scanguard]\nenabled = yes\n# Café ☕\nenabled = no\n")
    with pytest.raises(ConfigError) as e:
        load_file(path)
    assert "line 4" in str(e.value) and "'enabled' is set twice" in str(e.value)


def test_invalid_utf8_is_named_with_its_line_without_echoing_bytes(conf_dir):
    p = conf_dir / "scanguard.conf"
    p.write_bytes("[scanguard]\n# Café ☕\nenabled = ".encode("utf-8") + b"\xff\xfe\n")
    with pytest.raises(ConfigError) as e:
        load_file(str(p))
    assert str(p) in str(e.value) and "line 3" in str(e.value) and "UTF-8" in str(e.value)


# ---- files that are not small regular files -------------------------------------------------------

def refused(path):
    """load_file's error for `path`, run in a thread so that a blocking open fails the test."""
    result = {}

    def run():
        try:
            load_file(path)
        except ConfigError as e:
            result["error"] = str(e)
        else:
            result["error"] = None

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive(), f"load_file({path!r}) blocked"
    assert result["error"] is not None, f"load_file({path!r}) accepted it"
    assert path in result["error"] and len(result["error"]) < SHORT + len(path)
    return result["error"]


def test_directory_is_refused_by_name(conf_dir):
    d = conf_dir / "dir.conf"
    d.mkdir()
    assert "cannot read: it is a directory, not a regular file" in refused(str(d))


def test_fifo_is_refused_without_blocking(conf_dir):
    fifo = conf_dir / "fifo.conf"
    os.mkfifo(fifo)
    assert "FIFO" in refused(str(fifo))


def test_symlink_to_dev_zero_is_refused_without_reading_it(conf_dir):
    link = conf_dir / "zero.conf"
    link.symlink_to("/dev/zero")
    assert "character device, not a regular file" in refused(str(link))


def test_oversized_file_is_refused_with_its_size(conf_dir):
    p = conf_dir / "scanguard.conf"
    p.write_text("x" * 3_000_000)  # 3 MB, no section header: must not be echoed
    assert f"is 3000000 bytes; at most {MAX_FILE_BYTES}" in refused(str(p))


def test_file_at_the_size_cap_is_read_one_byte_over_is_not(conf_dir):
    head = "[scanguard]\nenabled = no\n# Café ☕ "
    pad = MAX_FILE_BYTES - len(head.encode("utf-8")) - 1
    at_cap = write(conf_dir, head + "x" * pad + "\n", "at.conf")
    assert os.path.getsize(at_cap) == MAX_FILE_BYTES
    assert load_file(at_cap).enabled is False
    over = write(conf_dir, head + "x" * (pad + 1) + "\n", "over.conf")
    assert f"is {MAX_FILE_BYTES + 1} bytes" in refused(over)


@pytest.mark.parametrize("line", ["x" * 60_000, "☕" * 20_000])
def test_huge_line_without_section_header_is_not_echoed(conf_dir, line):
    path = write(conf_dir, line + " = 3\n")
    error = refused(path)
    assert "line 1" in error and line[:SHORT] not in error


@pytest.mark.parametrize("value", ["9" * 60_000, "☕" * 20_000])
def test_huge_value_in_the_file_is_cut_in_the_error(conf_dir, value):
    path = write(conf_dir, f"[scanguard]\nthreshold_mbit = {value}\n")
    error = refused(path)
    assert f"'{value[:10]}" in error and "…" in error and f"({len(value)} characters)" in error


# ---- the number grammar ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("5", 5.0), ("+5", 5.0), ("2.5", 2.5), (".5", 0.5), ("5.", 5.0), ("0", 0.0), ("-0", 0.0),
    (" 7 ", 7.0), ("\t7\t", 7.0), ("007.50", 7.5),
])
def test_decimal_grammar_accepts(text, expected):
    assert parse_value("threshold_mbit", text, "here") == expected


@pytest.mark.parametrize("text", [
    "1_000", "١٢", "٣", "５", "²", "nan", "NaN", "inf", "-inf", "Infinity", "1e3", "1E3", "1 000",
    "1.2.3", "..5", ".", "+", "++5", "-+5", "0x10", "5µ", "5 µ", "Café ☕", "", "   ", "\u00a05",
    "5\u2009", "5\n6", "5,5", "٫5", "1" + "0" * 40,
])
def test_decimal_grammar_rejects(text):
    with pytest.raises(ConfigError) as e:
        parse_value("threshold_mbit", text, "here")
    assert "here: threshold_mbit = '" in str(e.value) and "expected a number" in str(e.value)


@pytest.mark.parametrize("text", ["1.0", "1.", ".5", "1e0", "1_0", "١", "3 0", "2.5µ"])
def test_integer_keys_reject_a_decimal_point_and_other_forms(text):
    with pytest.raises(ConfigError, match="whole number"):
        parse_value("engage_after", text, "here")


@pytest.mark.parametrize("text, expected", [("3", 3), ("+3", 3), (" 12 ", 12), ("0010", 10)])
def test_integer_grammar_accepts(text, expected):
    value = parse_value("engage_after", text, "here")
    assert value == expected and isinstance(value, int)


@pytest.mark.parametrize("text, expected", [("yes", True), (" On ", True), ("0", False), ("FALSE", False)])
def test_booleans_as_before(text, expected):
    assert parse_value("enabled", text, "here") is expected


@pytest.mark.parametrize("text, expected", [
    ("targeted", "targeted"), ("full", "full"), (" Full ", "full"), ("TARGETED\t", "targeted"),
])
def test_roam_scans_takes_its_two_words_as_booleans_take_theirs(text, expected):
    assert parse_value("roam_scans", text, "here") == expected


@pytest.mark.parametrize("text", ["Café ☕", "partial", "", "full targeted", "yes", "fu ll",
                                  "full\u00a0", "ＦＵＬＬ", "full ☕"])
def test_roam_scans_refuses_anything_else_naming_key_value_and_form(text):
    with pytest.raises(ConfigError) as e:
        parse_value("roam_scans", text, "profile 'Café ☕'")
    assert str(e.value) == (f"profile 'Café ☕': roam_scans = {quoted(text)} is not valid; "
                            "expected targeted or full")


def test_non_ascii_value_is_named_correctly_in_the_error():
    with pytest.raises(ConfigError) as e:
        parse_value("threshold_mbit", "5µ", "profile 'Café ☕'")
    text = str(e.value)
    assert text.startswith("profile 'Café ☕': threshold_mbit = '5µ' is not valid")
    assert text.encode("utf-8").decode("utf-8") == text  # no surrogates: safe for UTF-8 buses


# ---- echoing user text ----------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["Cafe", "Café ☕", "5µ", "👩\u200d💻"])
def test_clipped_keeps_printable_text(text):
    assert clipped(text) == text and quoted(text) == f"'{text}'"


@pytest.mark.parametrize("text, shown", [
    ("a\nb", "a\\nb"), ("a\rb", "a\\rb"), ("a\tb", "a\\tb"), ("a\\b", "a\\\\b"), ("\x00", "\\x00"),
    ("\x1b[2J", "\\x1b[2J"), ("\u202eCafé", "\\u202eCafé"), ("a\u2028b", "a\\u2028b"),
    ("5\u00a0", "5\\xa0"), ("\x85", "\\x85"),
])
def test_clipped_escapes_controls_so_a_line_stays_one_line(text, shown):
    assert clipped(text) == shown


@pytest.mark.parametrize("unit", ["x", "☕", "\n"])
def test_clipped_cuts_long_text_and_says_how_long_it_was(unit):
    text = unit * 100_000
    out = clipped(text)
    assert out.endswith(f"… ({len(text)} characters)") and len(out) < 80 and "\n" not in out


# ---- the shipped example ---------------------------------------------------------------------------

def test_every_key_documented_in_example_config(tmp_path):
    example = pathlib.Path(__file__).parents[3] / "nm_scanguard" / "scanguard.conf"
    text = example.read_text(encoding="utf-8")
    for key in KEYS:
        assert f"#{key} = " in text or f"# {key} = " in text, key
    # and the commented example parses to the defaults once uncommented
    uncommented = "\n".join(l[1:] if l.startswith("#") and " = " in l else l for l in text.splitlines())
    p = tmp_path / "scanguard.conf"
    p.write_text(uncommented, encoding="utf-8")
    assert load_file(str(p)).values() == Settings().values()
    assert len(example.read_bytes()) < MAX_FILE_BYTES // 8  # plenty of room under the cap


# ---- one way to write a value, and which files must exist ---------------------------------------

@pytest.mark.parametrize("key,value,text", [
    ("enabled", True, "yes"), ("enabled", False, "no"), ("threshold_mbit", 1.0, "1"),
    ("threshold_mbit", 0.00001, "0.00001"), ("threshold_mbit", 100000.0, "100000"),
    ("threshold_mbit", 2.5, "2.5"), ("signal_floor_dbm", -80.25, "-80.25"),
    ("sample_interval", 0.1, "0.1"), ("threshold_pps", 60, "60"), ("engage_after", 3, "3"),
    ("roam_scans", "full", "full"), ("roam_scans", "targeted", "targeted"),
])
def test_values_are_written_in_the_file_s_own_syntax(key, value, text):
    assert config.format_value(value) == text
    assert parse_value(key, text, "here") == value


def test_every_key_that_takes_words_names_them_for_completion_and_the_man_page():
    for key, spec in KEYS.items():
        if isinstance(getattr(Settings(), key), (bool, str)):
            assert spec.words and spec.form == " or ".join(spec.words), key
            assert len({spec.parse(w) for w in spec.words}) == len(spec.words), key
        else:
            assert spec.words == (), key


def test_every_default_reads_back_as_itself():
    for key, value in Settings().values().items():
        assert parse_value(key, config.format_value(value), "here") == value, key


@pytest.mark.parametrize("name", NAMES)
def test_settings_table_names_each_source(name):
    s = Settings().with_values({"threshold_mbit": 7.0}, f"profile {name}\x1b[2J")
    lines = config.settings_table(s)
    assert len(lines) == len(KEYS)
    assert lines[1] == f"threshold_mbit        7           profile {name}\\x1b[2J"
    assert lines[0].split() == ["enabled", "yes", "default"]


def test_a_required_file_must_exist_and_says_what_to_do(conf_dir):
    path = str(conf_dir / "absent.conf")
    with pytest.raises(config.ConfigMissing) as e:
        load_file(path, required=True)
    assert str(e.value).startswith(f"{path}: no such file; give the path of an existing file, "
                                   "or leave --config out to use /etc/scanguard/scanguard.conf")
    assert config.named_file_required(path)
    assert not config.named_file_required(config.DEFAULT_CONFIG_PATH)


def test_scanguardd_accepts_an_absent_default_file_only(tmp_path, monkeypatch, capsys):
    from nm_scanguard.daemon import service
    monkeypatch.setattr(service, "DEFAULT_CONFIG_PATH", str(tmp_path / "Café ☕.conf"))
    monkeypatch.setattr(config, "DEFAULT_CONFIG_PATH", str(tmp_path / "Café ☕.conf"))
    monkeypatch.setattr(service, "setup_logging", lambda verbose: None)  # keep pytest's handlers
    assert service.main(["--check-config"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{tmp_path}/Café ☕.conf: not present, built-in defaults apply; ")
    assert service.main(["--check-config", "-c", str(tmp_path / "other.conf")]) == 1
    assert "other.conf: no such file" in capsys.readouterr().err
