"""The manual pages as the package builds them (issue 34, item 6): `python3 man/build.py DIR`,
the command debian/rules runs.

Each option is listed under the heading of the parser that accepts it -- the main options under
OPTIONS, `config --config` under `scanguardctl config`, not under a sub-verb -- each parser's
epilog is there, every page has SEE ALSO, scanguardd(8) says what its parser cannot (signals,
exit status, files, the D-Bus name), and scanguard.conf(5) gives each key its range and default,
checked against what nm_scanguard.config accepts."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nm_scanguard import __version__
from nm_scanguard.cli import scanguardctl as cli
from nm_scanguard.daemon import service
from nm_scanguard.config import KEYS, Settings

REPO = Path(__file__).resolve().parents[3]
BUILD = REPO / "man" / "build.py"


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("man")
    proc = subprocess.run([sys.executable, str(BUILD), str(out)], capture_output=True, text=True,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return {p.name: p.read_text(encoding="utf-8") for p in out.iterdir()}


# ---- reading troff ----------------------------------------------------------------------------

def plain(troff: str) -> str:
    """Text as a reader sees it: font changes and escapes removed."""
    text = re.sub(r"\\f[BIRP]|\\[,/&]", "", troff)
    return text.replace("\\-", "-").replace("\\e", "\\")


def tag_text(tag: str) -> str:
    """A .TP tag as a reader sees it, whether written with font escapes or as a font macro
    (`.BR SIGTERM ", " SIGINT`: the arguments joined)."""
    m = re.match(r"^\.(?:[BI]|[BIR][BIR]) (.*)$", tag)
    if m:
        tag = "".join(a or b for a, b in re.findall(r'"([^"]*)"|(\S+)', m.group(1)))
    return plain(tag)


def blocks(page: str) -> dict[str, list[str]]:
    """heading (.SH or .SS, quotes removed) -> the lines under it, up to the next heading."""
    out: dict[str, list[str]] = {}
    current = ""
    for line in page.splitlines():
        m = re.match(r'^\.S[HS] "?(.*?)"?$', line)
        if m:
            current = plain(m.group(1))
            assert current not in out, f"heading {current!r} twice"
            out[current] = []
        else:
            out.setdefault(current, []).append(line)
    return out


def entries(lines: list[str]) -> list[set[str]]:
    """The names each .TP entry under a heading stands for: its options (bold, starting with
    '-'), or else the whole tag (a positional argument, a signal, a file)."""
    out = []
    for i, line in enumerate(lines[:-1]):
        if line == ".TP":
            tag = lines[i + 1]
            options = {plain(o) for o in re.findall(r"\\fB(\\-[^\\]*(?:\\-[^\\]*)*)\\fR", tag)}
            out.append(options or {tag_text(tag)})
    return out


def expected(parser: argparse.ArgumentParser, heading: str = "OPTIONS") -> dict[str, list[set[str]]]:
    """heading -> the names of each argument the parser under that heading takes itself."""
    own = []
    out: dict[str, list[set[str]]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out.update(expected(sub, sub.prog))
            continue
        own.append(set(action.option_strings) or {action.metavar or action.dest})
    if own:
        out[heading] = own
    return out


# ---- the generated pages ----------------------------------------------------------------------

PARSERS = [("scanguardd.8", service.build_parser), ("scanguardctl.1", cli.build_parser)]


@pytest.mark.parametrize("name,build_parser", PARSERS, ids=[p for p, _ in PARSERS])
def test_each_option_is_listed_under_its_own_verb(pages, name, build_parser):
    found = blocks(pages[name])
    want = expected(build_parser())
    assert want, "no arguments at all?"
    for heading, names in want.items():
        assert heading in found, f"{name}: no heading {heading!r}; headings: {list(found)}"
        assert entries(found[heading]) == names, f"{name}, under {heading!r}"
    # No option anywhere else (a signal or a file is an entry, not an option).
    for heading, lines in found.items():
        if heading not in want:
            stray = [e for e in entries(lines) if any(n.startswith("-") for n in e)]
            assert not stray, f"{name}: {stray} listed under {heading!r}"


def test_the_check_sees_options_under_the_wrong_verb():
    """What argparse-manpage 1.2 wrote: `--config` after the last sub-verb of config."""
    page = ("\n".join([".SH OPTIONS", ".SS \"scanguardctl config\"", ".PP", "text",
                       ".SS \"scanguardctl config unset\"", ".TP", "\\fICONNECTION\\fR",
                       ".TP", "\\fB\\-\\-config\\fR \\fIFILE\\fR", "global settings file"]))
    found = blocks(page)
    assert "scanguardctl config" in found
    assert entries(found["scanguardctl config"]) == []
    assert entries(found["scanguardctl config unset"]) == [{"CONNECTION"}, {"--config"}]


@pytest.mark.parametrize("name,build_parser", PARSERS, ids=[p for p, _ in PARSERS])
def test_each_epilog_and_description_is_on_the_page(pages, name, build_parser):
    text = " ".join(plain(pages[name]).split())
    parsers = [build_parser()]
    seen = 0
    while parsers:
        p = parsers.pop()
        for part in (p.description, p.epilog):
            if part:
                assert " ".join(part.replace("`", "").split()) in text, f"{name}: {part[:60]!r}"
                seen += 1
        parsers += [s for a in p._actions if isinstance(a, argparse._SubParsersAction)
                    for s in a.choices.values()]
    assert seen >= 2


@pytest.mark.parametrize("name,section,others", [
    ("scanguardd.8", "8", ["scanguardctl (1)", "scanguard.conf (5)"]),
    ("scanguardctl.1", "1", ["scanguardd (8)", "scanguard.conf (5)"]),
    ("scanguard.conf.5", "5", ["scanguardd (8)", "scanguardctl (1)"]),
])
def test_every_page_has_its_header_and_see_also(pages, name, section, others):
    page = pages[name]
    title = name.rsplit(".", 1)[0].upper()
    th = next(line for line in page.splitlines() if line.startswith(".TH "))
    assert re.fullmatch(rf'\.TH {re.escape(title)} {section} "\d{{4}}-\d\d-\d\d" '
                        rf'"nm-scanguard {re.escape(__version__)}" "[A-Z][A-Za-z ]+"', th), th
    see_also = plain("\n".join(blocks(page)["SEE ALSO"]))
    for other in others:
        assert other.replace(" ", "") in see_also.replace(" ", ""), f"{name}: SEE ALSO lacks {other}"


def test_the_daemon_page_says_what_its_parser_cannot(pages):
    found = blocks(pages["scanguardd.8"])
    for heading in ("SIGNALS", "EXIT STATUS", "FILES", "D-BUS", "SEE ALSO"):
        assert heading in found, f"scanguardd(8) has no {heading}"
    assert [e for e in entries(found["SIGNALS"])][:2] == [{"SIGHUP"}, {"SIGTERM, SIGINT"}]
    assert {"0"} in entries(found["EXIT STATUS"]) and {"1"} in entries(found["EXIT STATUS"])
    files = {n for e in entries(found["FILES"]) for n in e}
    assert {"/etc/scanguard/scanguard.conf", "/run/scanguard/suspended.json"} <= files
    dbus = plain("\n".join(found["D-BUS"]))
    assert "io.github.nm_scanguard.ScanGuard1" in dbus and "/io/github/nm_scanguard/ScanGuard1" in dbus


def test_the_pages_name_the_files_the_code_uses(pages):
    from nm_scanguard.config import DEFAULT_CONFIG_PATH
    from nm_scanguard.daemon.bgscan.journal import DEFAULT_STATE_DIR, FILE_NAME
    from nm_scanguard.names import BUS_NAME, PATH
    text = plain(pages["scanguardd.8"])
    for thing in (DEFAULT_CONFIG_PATH, f"{DEFAULT_STATE_DIR}/{FILE_NAME}", BUS_NAME, PATH):
        assert thing in text, f"scanguardd(8) does not name {thing}"


# ---- scanguard.conf(5): each key with its range and default --------------------------------

def conf_entries(page: str) -> dict[str, str]:
    """key -> its entry's text under OPTIONS in scanguard.conf(5)."""
    out = {}
    for chunk in "\n".join(blocks(page)["OPTIONS"]).split(".TP\n")[1:]:
        head, _, body = chunk.partition("\n")
        m = re.match(r"\.B[IR] (\w+) ", head)
        assert m, f"scanguard.conf(5): an OPTIONS entry without a key: {head!r}"
        out[m.group(1)] = plain(body)
    return out


def _accepts(key: str, text: str) -> bool:
    try:
        KEYS[key].parse(text)
    except ValueError:
        return False
    return True


def test_conf_page_gives_every_key_its_range_and_default(pages):
    found = conf_entries(pages["scanguard.conf.5"])
    assert set(found) == set(KEYS), "scanguard.conf(5) OPTIONS and config.KEYS differ"
    defaults = Settings().values()
    for key, body in found.items():
        default = re.search(r"^Default: (\S+?)\.?$", body, re.M)
        assert default, f"scanguard.conf(5): {key} states no default"
        assert KEYS[key].parse(default.group(1)) == defaults[key], f"{key}: {default.group(1)}"
        if KEYS[key].words:  # yes or no, targeted or full
            values = re.search(r"^Values: (.*)\.$", body, re.M)
            assert values and values.group(1) == KEYS[key].form, \
                f"{key}: no 'Values: {KEYS[key].form}.'"
            continue
        m = re.search(r"^Range: (\S+) to (\S+?)(, whole numbers)?\.$", body, re.M)
        assert m, f"scanguard.conf(5): {key} states no range"
        lo, hi, whole = m.group(1), m.group(2), bool(m.group(3))
        assert _accepts(key, lo) and _accepts(key, hi), f"{key}: {lo} to {hi} not accepted"
        step = 1 if whole else 0.01
        below, above = (f"{float(v) + d:.2f}" if not whole else str(int(v) + int(d))
                        for v, d in ((lo, -step), (hi, step)))
        assert not _accepts(key, below) and not _accepts(key, above), \
            f"{key}: the page says {lo} to {hi}, yet {below} or {above} is accepted"
        assert whole == (not _accepts(key, f"{float(lo) + 0.5}")), \
            f"{key}: the page {'says' if whole else 'does not say'} whole numbers"


def test_the_range_check_finds_a_wrong_range():
    assert _accepts("engage_after", "1") and _accepts("engage_after", "3600")
    assert not _accepts("engage_after", "0") and not _accepts("engage_after", "3601")
    assert not _accepts("engage_after", "1.5") and _accepts("sample_interval", "0.1")
    assert not _accepts("sample_interval", "0.09")
    assert not _accepts("threshold_mbit", "Café ☕")


def test_every_state_word_is_explained_in_status_help_the_man_page_and_the_xml(pages):
    """A user meets the state words in `scanguardctl status`: each one the policy can show is
    explained in `status --help` and scanguardctl(1), as in the D-Bus XML's `state` list."""
    from nm_scanguard.daemon.guard import policy
    from nm_scanguard.status import STATE_MEANINGS

    words = {v for k, v in vars(policy).items() if k.isupper() and isinstance(v, str)}
    assert set(STATE_MEANINGS) == words
    status = next(a for a in cli.build_parser()._actions
                  if isinstance(a, argparse._SubParsersAction)).choices["status"]
    page = " ".join(plain(pages["scanguardctl.1"]).split())
    xml = (REPO / "nm_scanguard" / "io.github.nm_scanguard.ScanGuard1.xml").read_text(encoding="utf-8")
    listed = re.search(r"state\s+s\s+([a-z| \n-]+?)\n\s+idle:", xml)
    assert listed, "the XML's Devices doc no longer lists the states"
    assert set(listed.group(1).replace("|", " ").split()) == words
    for word, meaning in STATE_MEANINGS.items():
        # Compared without white space: help wraps at the terminal's width, also at hyphens.
        assert "".join(f"{word}: {meaning}".split()) in "".join(status.format_help().split()), word
        assert f"{word}: {' '.join(meaning.split())}" in page, word
        assert re.search(rf"\b{re.escape(word)}:", xml), f"the XML does not explain {word}"


def _control_description() -> str:
    text = (REPO / "debian" / "control").read_text(encoding="utf-8")
    return " ".join(text.split("\nDescription:", 1)[1].split())


def _hold_description() -> str:
    verbs = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return " ".join(verbs.choices["hold"].description.split())


@pytest.mark.parametrize("where", ["scanguardd --help", "debian/control", "hold --help"])
def test_no_summary_says_bgscan_comes_back_whenever_the_signal_fades(where):
    """With roam_scans = targeted (the default) a fading signal keeps bgscan suspended while
    the guard scans the known access points' channels: a summary that speaks of the signal
    says so."""
    text = {"scanguardd --help": lambda: " ".join(service.build_parser().description.split()),
            "debian/control": _control_description, "hold --help": _hold_description}[where]()
    assert "signal" in text
    assert "known access points" in text, text
