"""The documents against the code they describe (issue 25).

README.md is for the person installing nm-scanguard; docs/ holds one document per audience.  A
setting, a default or a D-Bus member missing from the document that lists it fails here, as does
a relative link that leads nowhere, a `scanguardctl` verb that does not exist, or a paragraph or
table row that two documents both carry."""

from __future__ import annotations

import re
import unicodedata
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from nm_scanguard.cli import scanguardctl as cli
from nm_scanguard.config import KEYS, Settings, format_value

REPO = Path(__file__).resolve().parents[3]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
MAN5 = REPO / "systemd" / "scanguard.conf.5"
XML = REPO / "nm_scanguard" / "io.github.nm_scanguard.ScanGuard1.xml"
# Every Markdown document whose links are checked.
LINKED = [README, *DOCS, REPO / "tests" / "lab" / "README.md", REPO / "tests" / "debian_roots" / "README.md",
          REPO / "systemd" / "README.md", REPO / "NEWS.md"]


# ---- reading Markdown -----------------------------------------------------------------------------

def prose(text: str) -> str:
    """`text` without fenced code blocks and inline code spans: what a link or a heading can be."""
    text = re.sub(r"^```.*?^```[ \t]*$", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "``", text)


def headings(text: str) -> list[str]:
    text = re.sub(r"^```.*?^```[ \t]*$", "", text, flags=re.M | re.S)
    return [m.group(2).strip() for m in re.finditer(r"^(#{1,6})\s+(.*)$", text, re.M)]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case; every character but letters, digits, '_',
    '-' and spaces dropped (punctuation, symbols such as '☕', backticks); spaces become '-'."""
    out = []
    for char in heading.strip().lower():
        if char in " -_" or unicodedata.category(char)[0] in "LN":
            out.append("-" if char == " " else char)
    return "".join(out)


def anchors(path: Path) -> set[str]:
    """The anchors of a document's headings; a repeated heading gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for heading in headings(path.read_text(encoding="utf-8")):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


LINK = re.compile(r"!?\[(?:[^\]\n]|\n(?!\n))*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def links(text: str) -> list[str]:
    return [m.group(1) for m in LINK.finditer(prose(text))]


def broken_links(path: Path) -> list[str]:
    """Every relative link of `path` whose file, or heading within it, does not exist."""
    bad = []
    for target in links(path.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, man: ...
            continue
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            bad.append(f"{target}: no {dest}")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            bad.append(f"{target}: no heading with the anchor #{fragment} in {dest.name}")
    return bad


def table_rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row (header and separator rows included)."""
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.lstrip().startswith("|")]


# ---- links ------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", LINKED, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(path):
    assert path.exists(), path
    assert broken_links(path) == []


def test_the_link_check_finds_missing_files_and_headings_also_in_non_ascii(tmp_path):
    (tmp_path / "other.md").write_text("# Café ☕ lab\n\n## What it cannot stop: scans\n",
                                       encoding="utf-8")
    doc = tmp_path / "doc.md"
    doc.write_text("See [it](other.md#café--lab), [that](other.md#what-it-cannot-stop-scans),\n"
                   "[up](#notes) and ![plot](missing.png); `[code](nowhere.md)` is not a link.\n"
                   "[gone](other.md#cafe-lab) [lost](gone.md) [web](https://example.org/x)\n\n"
                   "## Notes\n```\n[in a block](nowhere.md)\n```\n", encoding="utf-8")
    assert anchors(tmp_path / "other.md") == {"café--lab", "what-it-cannot-stop-scans"}
    assert [b.split(":")[0] for b in broken_links(doc)] == ["missing.png", "other.md#cafe-lab",
                                                           "gone.md"]


# ---- README: the person installing it -----------------------------------------------------------

def test_readme_is_short_and_in_the_order_an_installer_needs():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    order = ["Is it scanning?", "Install", "Check that it works", "Everyday use",
             "What it cannot stop", "Uninstall", "The two commands", "Read more"]
    top = [h for h in headings(text) if not h.startswith("Settings")][1:]
    assert [next((o for o in order if h.startswith(o)), h) for h in top] == order
    assert "](docs/demo-example.png)" in text.split("## Install")[0]  # the lab's plot first
    scanning = text.split("## Is it scanning?")[1].split("\n## ")[0]  # issue 23: near the top
    assert "scanguardctl diagnose" in scanning and "](docs/diagnose-example.png)" in scanning


PAPER = ("Experimental Analysis and Resolution Proposal on Performance Degradation of TCP over "
         "IEEE 802.11n Wireless LAN Caused by Access Point Scanning")


def sentences(paragraph: str) -> list[str]:
    return re.split(r"(?<=[.!?])\s+(?=[A-Z])", " ".join(paragraph.split()))


def test_the_first_screen_says_who_gains_and_what_it_cannot_do():
    """Issue 34, item 13: two sentences at the top, the first on who gains (by signal and by
    number of access points, per release), the second on the scans programs ask for; the paper
    named; every figure on the first screen from one dated run."""
    first = README.read_text(encoding="utf-8").split("\n## ", 1)[0]
    paragraphs = first.split("\n\n")
    who, cannot = sentences(paragraphs[1])
    for words in ("`simple:30:-70:86400`", "once a day", "−70 dBm", "every 30 s", "1.44 (Debian 13)",
                  "`simple:30:-65:300`", "more than one BSSID", "dual-band or mesh router",
                  "Debian 12 below −70 dBm", "Debian 13 at any signal"):
        assert words in who, f"the first sentence lacks {words!r}: {who}"
    for words in ("GNOME", "every 15 s while open", "KDE", "every 10 s", "GeoClue", "refuses", "aborts"):
        assert words in cannot, f"the second sentence lacks {words!r}: {cannot}"
    assert PAPER in " ".join(first.split())
    assert PAPER in " ".join((REPO / "docs" / "paper.md").read_text(encoding="utf-8").split())
    with_figures = [p for p in paragraphs if "%" in p]
    assert len(with_figures) == 1, "figures in more than one paragraph of the first screen"
    (figures,) = with_figures
    assert len(re.findall(r"\b\d{4}-\d\d-\d\d \d\d:\d\d UTC\b", figures)) == 1, figures
    assert "`make demo`" in figures and "−72 dBm" in figures
    assert not re.search(r"\b\d{4}-\d\d-\d\d\b", first.replace(figures, "")), "another date"


def test_the_sentence_split_keeps_parentheses_and_units():
    assert sentences("A (Debian 13) at 5.5 s, e.g. b.\nThe other (GNOME 15 s).") == [
        "A (Debian 13) at 5.5 s, e.g. b.", "The other (GNOME 15 s)."]


def test_the_two_commands_are_make_demo_and_make_test():
    section = README.read_text(encoding="utf-8").split("## The two commands", 1)[1].split("\n## ")[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    assert [line.split("#")[0].strip() for line in block.splitlines()] == ["make demo", "make test"]
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)


def _verbs() -> dict[str, set[str]]:
    """scanguardctl's verbs, each with its own sub-verbs (config: show, set, unset)."""
    parser = cli.build_parser()
    verbs: dict[str, set[str]] = {}
    for action in parser._subparsers._group_actions:  # argparse keeps no public list
        for name, sub in action.choices.items():
            subs = [a for a in sub._actions if a.__class__.__name__ == "_SubParsersAction"]
            verbs[name] = {c for a in subs for c in a.choices}
    return verbs


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: str(p.relative_to(REPO)))
def test_every_scanguardctl_verb_shown_exists(path):
    verbs = _verbs()
    assert "status" in verbs and verbs["config"] == {"show", "set", "unset"}
    text = path.read_text(encoding="utf-8")
    for m in re.finditer(r"scanguardctl ([a-z][a-z-]*)(?: ([a-z]+))?", text):
        verb, sub = m.group(1), m.group(2)
        assert verb in verbs, f"{path.name} shows `scanguardctl {verb}`, which does not exist"
        if verbs[verb] and sub is not None:
            assert sub in verbs[verb], f"{path.name}: `scanguardctl {verb} {sub}` does not exist"


# ---- settings: one README table and scanguard.conf(5), both from config.KEYS ------------------

def _readme_settings() -> dict[str, str]:
    """key -> default, from the table of the README's "Settings" section."""
    section = README.read_text(encoding="utf-8").split("\n### Settings\n", 1)[1].split("\n#", 1)[0]
    rows = table_rows(section)
    assert rows and rows[0][:2] == ["key", "default"], rows[:1]
    return {row[0].strip("`"): row[1].strip("`") for row in rows[2:]}


def test_readme_settings_table_has_every_key_with_the_default_config_show_prints():
    table = _readme_settings()
    defaults = Settings().values()
    assert set(table) == set(KEYS), "the README's settings table and config.KEYS differ"
    for key, shown in table.items():
        assert shown == format_value(defaults[key]), f"README: {key} default {shown!r}"


def _man_entries() -> dict[str, str]:
    """key -> the text of its entry under OPTIONS in scanguard.conf(5)."""
    text = MAN5.read_text(encoding="utf-8")
    options = text.split("\n.SH OPTIONS\n", 1)[1].split("\n.SH ", 1)[0]
    entries = {}
    for chunk in options.split(".TP\n")[1:]:
        head, _, body = chunk.partition("\n")
        m = re.match(r"\.B[IR] (\w+) ", head)
        assert m, f"scanguard.conf(5): an OPTIONS entry without a key: {head!r}"
        entries[m.group(1)] = body
    return entries


def test_man_page_describes_every_key_with_its_default():
    entries = _man_entries()
    defaults = Settings().values()
    assert set(entries) == set(KEYS), "scanguard.conf(5) OPTIONS and config.KEYS differ"
    for key, body in entries.items():
        m = re.search(r"^Default: (\S+?)\.?$", body, re.M)
        assert m, f"scanguard.conf(5): {key} states no default"
        written = m.group(1).replace("\\-", "-")
        assert KEYS[key].parse(written) == defaults[key], f"scanguard.conf(5): {key} = {written}"


def test_the_settings_table_lives_in_the_readme_only():
    for path in [*DOCS, REPO / "tests" / "lab" / "README.md", REPO / "tests" / "debian_roots" / "README.md"]:
        listed = {row[0].strip("`") for row in table_rows(path.read_text(encoding="utf-8"))} & set(KEYS)
        assert not listed, f"{path.name} has a settings table too: {sorted(listed)}"


# ---- the D-Bus API: docs/dbus-api.md against the XML ------------------------------------------

def _xml_members() -> dict[str, str]:
    """member -> how docs/dbus-api.md writes it: `Name` (type) for a property, `Name(t arg, ...)`
    with ` → t out` for a method, `Name(t arg, ...)` for a signal."""
    iface = ET.parse(XML).getroot().find("interface")
    out = {}
    for node in iface:
        name = node.get("name")
        if node.tag == "property":
            out[name] = f"`{name}` ({node.get('type')})"
            continue
        args = node.findall("arg")
        ins = [a for a in args if node.tag == "signal" or a.get("direction", "in") == "in"]
        outs = [a for a in args if node.tag == "method" and a.get("direction") == "out"]
        text = name + "(" + ", ".join(f"{a.get('type')} {a.get('name')}" for a in ins) + ")"
        if outs:
            text += " → " + ", ".join(f"{a.get('type')} {a.get('name')}" for a in outs)
        out[name] = f"`{text}`" if args else f"`{name}()`"
    return out


def test_dbus_api_doc_lists_every_member_as_the_xml_declares_it():
    members = _xml_members()
    assert {"Hold", "Release", "Devices", "HoldReleased"} <= set(members)
    rows = table_rows((REPO / "docs" / "dbus-api.md").read_text(encoding="utf-8"))
    listed = {re.match(r"`(\w+)", row[0]).group(1): row[0] for row in rows
              if re.match(r"`[A-Z]\w*[`(]", row[0])}
    assert set(listed) == set(members), "docs/dbus-api.md's table and the XML differ"
    for name, written in listed.items():
        assert written == members[name], f"docs/dbus-api.md: {written} but the XML says {members[name]}"


# ---- one audience per document, and no document repeats another ---------------------------------

@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_each_doc_starts_with_who_it_is_for(path):
    text = path.read_text(encoding="utf-8")
    first = text.split("\n\n")[1]
    assert text.startswith("# ") and first.startswith("For "), f"{path.name}: {first[:60]!r}"


def _passages(path: Path) -> set[str]:
    """Paragraphs of prose (at least 100 characters) and table rows (at least 40), whitespace
    normalised: what would be a copy if another document had it too."""
    text = re.sub(r"^```.*?^```[ \t]*$", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    out = set()
    for block in re.split(r"\n\s*\n", text):
        lines = block.strip().splitlines()
        rows = [" ".join(line.split()) for line in lines if line.lstrip().startswith("|")]
        out.update(r for r in rows if len(r) >= 40 and not set(r) <= set("|-: "))
        para = " ".join(" ".join(line.split()) for line in lines if not line.lstrip().startswith("|"))
        if len(para) >= 100:
            out.add(para)
    return out


def test_no_document_repeats_another():
    seen: dict[str, str] = {}
    for path in LINKED:
        name = str(path.relative_to(REPO))
        for passage in _passages(path):
            first = seen.setdefault(passage, name)
            assert first == name, f"{first} and {name} both say: {passage[:80]}"


def test_the_readmes_status_example_is_what_status_prints_for_its_figures():
    """README's `scanguardctl status` line, rebuilt from its own figures by the code that prints
    it: the policy's reason at the default settings and status.device_line."""
    import time

    from nm_scanguard.daemon.guard.policy import Policy
    from nm_scanguard.daemon.guard.sampling import Rates
    from nm_scanguard.status import device_line

    text = README.read_text(encoding="utf-8")
    m = re.search(r"\$ scanguardctl status\n(.+)\n", text)
    assert m, "README has no `scanguardctl status` example"
    line = m.group(1)
    f = re.fullmatch(
        r"(?P<ifname>\S+) \('(?P<conn>[^']+)'\): guarding for (?P<m>\d+)m(?P<s>\d+)s \(traffic "
        r"(?P<mbit>[\d.]+) Mbit/s, (?P<pps>\d+) packets/s.*; rx (?P<rx>[\d.]+) Mbit/s, tx "
        r"(?P<tx>[\d.]+) Mbit/s, (?P<dbm>-\d+) dBm, .*", line)
    assert f, f"README's status example is not a guarding line: {line}"
    rx, tx = float(f["rx"]) * 1e6, float(f["tx"]) * 1e6
    policy = Policy(Settings())
    rates = Rates(rx_bps=rx, tx_bps=tx, pps=float(f["pps"]), seconds=1.0)
    for t in range(Settings().engage_after):
        policy.observe(1000.0 + t, rates)
    assert policy.state == "guarding"
    since = time.time() - (int(f["m"]) * 60 + int(f["s"])) - 0.5
    device = {"interface": f["ifname"], "connection_id": f["conn"], "state": "guarding",
              "reason": policy.reason, "since": since, "rx_bps": rx, "tx_bps": tx,
              "signal_dbm": int(f["dbm"]), "suspended_bgscan": "x", "scans_guarding": 0,
              "deferring_scans": True, "scan_requests_deferred": 0}
    assert device_line(device) == line


def test_the_readme_says_what_systemctl_status_leaves_out():
    """The STATUS= line is status.device_line without the profile's name and the age."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert re.search(r"`systemctl status scanguard` shows it without the profile's name and age", text)


def test_every_readme_section_named_elsewhere_exists():
    """A message, a man page or a document that sends the reader to `README, "Section"` names
    a heading the README has (a section that was renamed or merged leaves the reader lost)."""
    have = {h.lower() for h in headings(README.read_text(encoding="utf-8"))}
    named = []
    for path in [*REPO.glob("nm_scanguard/**/*.py"), *LINKED, *REPO.glob("man/*.extra"), MAN5,
                 REPO / "debian" / "control"]:
        text = " ".join(path.read_text(encoding="utf-8").split())
        named += [(path.name, n) for n in re.findall(r'(?<![\w/.])README(?:\.md)?, "([^"]+)"', text)]
    assert [(p, n) for p, n in named if n.lower() not in have] == []


def test_the_readme_section_check_sees_a_missing_heading():
    assert "install on debian 12 or 13" not in {h.lower() for h in headings("# A\n## Install\n")}


def _prose_defaults() -> list[tuple[str, str, str]]:
    """(file, key, value) for each place prose states a setting's default: "15 s after
    (`release_after`)", "`defer_client_scans = yes` (the default)"."""
    keys = "|".join(KEYS)
    found = []
    for path in [README, *DOCS, *REPO.glob("man/*.extra"), MAN5, *REPO.glob("nm_scanguard/**/*.py")]:
        text = " ".join(path.read_text(encoding="utf-8").split())
        for m in re.finditer(rf"(-?\d[\d.]*)\s*(?:s|dBm|Mbit/s|packets/s|samples?)?\s*(?:\w+\s*)?"
                             rf"\(`?({keys})`?[,)]", text):
            found.append((path.name, m.group(2), m.group(1)))
        for m in re.finditer(rf"`?({keys})\s*=\s*(-?[\w.]+)`?,?\s*\(?(?:the )?default", text):
            found.append((path.name, m.group(1), m.group(2)))
    return found


def test_defaults_stated_in_prose_are_the_codes():
    defaults = Settings().values()
    found = _prose_defaults()
    assert any(key == "release_after" for _, key, _ in found)  # README's "15 s after"
    wrong = [(name, key, value) for name, key, value in found
             if KEYS[key].parse(value) != defaults[key]]
    assert wrong == []


def test_the_state_words_the_readme_shows_are_the_daemons():
    from nm_scanguard.status import STATE_MEANINGS

    section = README.read_text(encoding="utf-8").split("\n## Check that it works\n", 1)[1].split("\n## ", 1)[0]
    shown = set(re.findall(r"`([a-z][a-z-]+)`", section)) - set(KEYS) - set(_verbs())
    shown -= {w for w in shown if " " in w}
    assert shown and shown <= set(STATE_MEANINGS), shown
