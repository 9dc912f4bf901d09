"""nm_scanguard.text: how every message shows a user's text (the callers' tests check their
wording; these check the one rule)."""

from __future__ import annotations

import pytest

from nm_scanguard import text as T
from nm_scanguard.text import MAX_TEXT, clipped, cut, one_line, quoted, shown
from tests.hostile import CAFE, HOSTILE, raw_troublemakers


@pytest.mark.parametrize("name", ["Home", "Café ☕", "ناصر‌ی"])  # the last keeps its ZWNJ
def test_a_name_in_any_script_is_shown_as_it_is(name):
    assert clipped(name) == name and quoted(name) == f"'{name}'"


def test_nothing_can_split_a_log_line_or_hide():
    assert clipped("Café ☕\nforged line\r\x00\u202e") == "Café ☕\\nforged line\\r\\x00\\u202e"
    assert clipped("a\u00a0b") == "a\\xa0b"  # a no-break space is not what it looks like


def test_a_long_value_costs_one_short_line_and_says_how_long_it_was():
    shown = quoted("Café ☕ " * 1000, limit=40)
    assert shown.endswith("… (7000 characters)'") and len(shown) < 70


def test_cut_keeps_short_text_and_marks_where_it_cut():
    assert cut("Café ☕") == "Café ☕"
    long = "é" * (MAX_TEXT + 10)
    assert cut(long) == "é" * (MAX_TEXT - 1) + "…" and len(cut(long)) == MAX_TEXT



@pytest.mark.parametrize("bad", HOSTILE)
def test_a_peers_text_cannot_reach_the_terminal_raw(bad):
    text = shown(f"{CAFE}{bad}tail")
    assert raw_troublemakers(text) == [] and text.startswith(f"{CAFE}\\")
    assert text.endswith("tail")


def test_a_peers_value_that_is_not_text_is_shown_as_text():
    assert shown(42) == "42" and shown(None) == "None"


def test_a_peers_status_text_is_shown_whole_up_to_the_status_limit():
    assert shown(f"{CAFE} " * 30) == f"{CAFE} " * 30
    assert shown("é" * (MAX_TEXT + 1)).endswith(f"… ({MAX_TEXT + 1} characters)")


@pytest.mark.parametrize("text", ["plain", "Café ☕", "a\nscanguardd: forged", "\x1b[2J\r",
                                  "\u2028\u202e\x85", "back\\slash"])
def test_one_line_escapes_what_clipped_escapes_and_keeps_the_rest(text):
    line = one_line(text)
    assert not any(c in line for c in "\n\r\x1b\u2028\u202e\x85")
    assert one_line(line) == line  # idempotent
    assert one_line(clipped(text)) == clipped(text)  # nothing left to escape after clipped
    if text.isprintable():
        assert line == text  # a backslash, "é" and "☕" as they are


@pytest.mark.parametrize("journal", [False, True], ids=["terminal", "journald"])
def test_every_daemon_log_message_is_one_line(monkeypatch, journal):
    """A peer's value that reached a message unclipped still cannot end the line: journald
    would file what follows a newline as a second entry under scanguardd's name."""
    import io
    import logging

    from nm_scanguard.daemon import service

    if journal:
        monkeypatch.setenv("JOURNAL_STREAM", "8:1")
    else:
        monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    out = io.StringIO()
    try:
        service.setup_logging(False, out)
        logging.getLogger("scanguard").info("value %s", "Café ☕\nscanguardd: wlan0: forged")
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
    text = out.getvalue()
    assert text.count("\n") == 1 and "Café ☕\\nscanguardd: wlan0: forged" in text, text


@pytest.mark.parametrize("code", range(128))
def test_printable_ascii_taken_as_it_is_is_what_the_character_rule_gives(code):
    # clipped and one_line return printable ASCII unchanged without looking at each character:
    # that must be what the per-character rule gives for every ASCII character.
    text = f"a{chr(code)}b"
    assert clipped(text) == "".join(T._escape(c) for c in text)
    assert one_line(text) == "".join(T._escape(c) if T.escaped(c) else c for c in text)
