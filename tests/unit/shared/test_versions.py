"""One version, in one place (issue 34, item 11): nm_scanguard.__version__, which setup.cfg and
both programs' --version read, is the version of the top debian/changelog entry and of the top
NEWS.md entry, with the same date; every changelog entry has its NEWS entry, newest first.

Between releases (issue 50, item 3) the top entry is the next version with ~dev, distribution
UNRELEASED, "(unreleased)" in NEWS.md: a build of main says it is not the release before it, and
its package sorts above that release and below the next."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nm_scanguard import __version__

REPO = Path(__file__).resolve().parents[3]
CHANGELOG = REPO / "debian" / "changelog"
NEWS = REPO / "NEWS.md"


UNRELEASED = "UNRELEASED"


def changelog_entries(text: str) -> list[tuple[str, str]]:
    """(version, YYYY-MM-DD) of each debian/changelog entry, newest first; the date of an
    UNRELEASED entry is "unreleased", as NEWS.md says it."""
    import email.utils
    heads = re.findall(r"^nm-scanguard \(([^)]+)\) (\S+); urgency=\w+$", text, re.M)
    dates = [email.utils.parsedate_to_datetime(d).strftime("%Y-%m-%d")
             for d in re.findall(r"^ -- .+ <[^>]+>  (.+)$", text, re.M)]
    assert len(heads) == len(dates), "an entry without its trailer line, or the reverse"
    return [(version, "unreleased" if dist == UNRELEASED else date)
            for (version, dist), date in zip(heads, dates)]


def news_entries(text: str) -> list[tuple[str, str]]:
    """(version, YYYY-MM-DD or "unreleased") of each `## VERSION (DATE)` heading of NEWS.md, in
    order."""
    return re.findall(r"^## (\S+) \((\d{4}-\d\d-\d\d|unreleased)\)$", text, re.M)


def check_versions(entries: list[tuple[str, str]]) -> None:
    """The rule for debian/changelog's entries (version, date or "unreleased"), newest first: a
    released entry has a release number, MAJOR.MINOR.PATCH; only the top entry may be
    unreleased, and then its version is a release number with ~dev, above every released one.
    (That it sorts above them as dpkg compares is test_dpkg_reads_every_entry_without_a_warning.)"""
    for i, (version, date) in enumerate(entries):
        if date == "unreleased":
            assert i == 0, f"{version} is UNRELEASED below the top entry"
            assert re.fullmatch(r"\d+\.\d+\.\d+~dev", version), \
                f"the UNRELEASED top entry's version {version} is not the next release's with ~dev (1.2.3~dev)"
            released = [tuple(map(int, v.split("."))) for v, _ in entries[1:]]
            upcoming = tuple(map(int, version.removesuffix("~dev").split(".")))
            assert all(upcoming > r for r in released), \
                f"the UNRELEASED top entry {version} is not above the last release {entries[1][0]}"
        else:
            assert re.fullmatch(r"\d+\.\d+\.\d+", version), \
                f"the released entry {version} ({date}) is not a release number (1.2.3)"


def test_the_version_is_a_release_number_or_the_next_ones_dev():
    check_versions(changelog_entries(CHANGELOG.read_text(encoding="utf-8")))


@pytest.mark.parametrize("entries,wrong", [
    ([("0.3.0~dev", "unreleased"), ("0.2.0", "2026-11-26")], None),
    ([("0.3.0", "2026-12-01"), ("0.2.0", "2026-11-26")], None),
    ([("0.2.0", "unreleased"), ("0.2.0", "2026-11-26")], "not the next release's with ~dev"),
    ([("0.2.0~dev", "unreleased"), ("0.2.0", "2026-11-26")], "not above the last release"),
    ([("0.1.9~dev", "unreleased"), ("0.2.0", "2026-11-26")], "not above the last release"),
    ([("0.3.0~dev", "2026-11-29"), ("0.2.0", "2026-11-26")], "not a release number"),
    ([("0.3.0", "2026-12-01"), ("0.3.0~dev", "unreleased")], "UNRELEASED below the top"),
    ([("Café ☕~dev", "unreleased"), ("0.2.0", "2026-11-26")], "not the next release's with ~dev"),
])
def test_the_version_rule(entries, wrong):
    if wrong is None:
        check_versions(entries)
    else:
        with pytest.raises(AssertionError, match=wrong):
            check_versions(entries)


def test_changelog_news_and_code_agree():
    log = changelog_entries(CHANGELOG.read_text(encoding="utf-8"))
    text = NEWS.read_text(encoding="utf-8")
    news = news_entries(text)
    assert log and news
    first = re.search(r"^## .*$", text, re.M)
    assert first and first.group(0) == f"## {news[0][0]} ({news[0][1]})", (
        f"NEWS.md's first section {first and first.group(0)!r} is no version's: changes not released "
        "yet go under `## NEXT~dev (unreleased)`, with debian/changelog's UNRELEASED top entry NEXT~dev")
    assert log[0][0] == __version__, f"debian/changelog's top entry is {log[0][0]}, the code says {__version__}"
    assert news[0] == log[0], f"NEWS.md's top entry {news[0]} is not the changelog's {log[0]}"
    assert [v for v, _ in news] == [v for v, _ in log], "NEWS.md and debian/changelog list different releases"


def test_the_check_reads_both_formats():
    log = ("nm-scanguard (1.2.3) unstable; urgency=medium\n\n  * Café ☕.\n\n -- A B <a@b>  "
           "Thu, 26 Nov 2026 10:00:00 +0000\n\nnm-scanguard (1.2.2) unstable; urgency=low\n\n"
           "  * x\n\n -- A B <a@b>  Sat, 21 Nov 2026 23:59:59 -0100\n")
    assert changelog_entries(log) == [("1.2.3", "2026-11-26"), ("1.2.2", "2026-11-21")]
    assert news_entries("# NEWS\n\n## 1.2.3 (2026-11-26)\n\n- Café ☕\n## later\n") == [("1.2.3", "2026-11-26")]
    unreleased = ("nm-scanguard (1.2.4~dev) UNRELEASED; urgency=medium\n\n  * Café ☕.\n\n -- A B <a@b>  "
                  "Fri, 27 Nov 2026 10:00:00 +0000\n\n")
    assert changelog_entries(unreleased + log)[:2] == [("1.2.4~dev", "unreleased"), ("1.2.3", "2026-11-26")]
    assert news_entries("## 1.2.4~dev (unreleased)\n\n## 1.2.3 (2026-11-26)\n") == [
        ("1.2.4~dev", "unreleased"), ("1.2.3", "2026-11-26")]


@pytest.mark.skipif(not shutil.which("dpkg-parsechangelog"), reason="needs dpkg-dev")
def test_dpkg_reads_every_entry_without_a_warning():
    # (-SVersion with --all prints the top entry's version alone)
    proc = subprocess.run(["dpkg-parsechangelog", "-l", str(CHANGELOG), "--all", "--format", "rfc822"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    versions = re.findall(r"^Version: (\S+)$", proc.stdout, re.M)
    assert len(versions) == len(changelog_entries(CHANGELOG.read_text(encoding="utf-8"))) > 1
    assert versions[0] == __version__
    for newer, older in zip(versions, versions[1:]):
        assert subprocess.run(["dpkg", "--compare-versions", newer, "gt", older]).returncode == 0, \
            f"{newer} is not newer than {older}"


@pytest.mark.parametrize("module,prog", [("nm_scanguard", "scanguardd"),
                                         ("nm_scanguard.cli.scanguardctl", "scanguardctl")])
def test_both_programs_print_it(module, prog):
    """What --version prints is the package's version: debian/changelog's top entry."""
    version = changelog_entries(CHANGELOG.read_text(encoding="utf-8"))[0][0]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, f"{prog} {version}\n"), proc.stderr


def test_setup_cfg_reads_the_version_from_the_code():
    setup = (REPO / "setup.cfg").read_text(encoding="utf-8")
    assert re.search(r"^version = attr: nm_scanguard.__version__$", setup, re.M)
    assert not re.search(r"^version\s*=\s*\d", (REPO / "pyproject.toml").read_text(), re.M)
