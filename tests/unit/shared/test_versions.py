"""One version, in one place (issue 34, item 11): nm_scanguard.__version__, which setup.cfg and
both programs' --version read, is the version of the top debian/changelog entry and of the top
NEWS.md entry, with the same date; every changelog entry has its NEWS entry, newest first."""

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


def changelog_entries(text: str) -> list[tuple[str, str]]:
    """(version, YYYY-MM-DD) of each debian/changelog entry, newest first."""
    import email.utils
    versions = re.findall(r"^nm-scanguard \(([^)]+)\) \S+; urgency=\w+$", text, re.M)
    dates = [email.utils.parsedate_to_datetime(d).strftime("%Y-%m-%d")
             for d in re.findall(r"^ -- .+ <[^>]+>  (.+)$", text, re.M)]
    assert len(versions) == len(dates), "an entry without its trailer line, or the reverse"
    return list(zip(versions, dates))


def news_entries(text: str) -> list[tuple[str, str]]:
    """(version, YYYY-MM-DD) of each `## VERSION (DATE)` heading of NEWS.md, in order."""
    return re.findall(r"^## (\S+) \((\d{4}-\d\d-\d\d)\)$", text, re.M)


def test_the_version_is_a_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__), __version__


def test_changelog_news_and_code_agree():
    log = changelog_entries(CHANGELOG.read_text(encoding="utf-8"))
    news = news_entries(NEWS.read_text(encoding="utf-8"))
    assert log and news
    assert log[0][0] == __version__, f"debian/changelog's top entry is {log[0][0]}, the code says {__version__}"
    assert news[0] == log[0], f"NEWS.md's top entry {news[0]} is not the changelog's {log[0]}"
    assert [v for v, _ in news] == [v for v, _ in log], "NEWS.md and debian/changelog list different releases"


def test_the_check_reads_both_formats():
    log = ("nm-scanguard (1.2.3) unstable; urgency=medium\n\n  * Café ☕.\n\n -- A B <a@b>  "
           "Thu, 26 Nov 2026 10:00:00 +0000\n\nnm-scanguard (1.2.2) unstable; urgency=low\n\n"
           "  * x\n\n -- A B <a@b>  Sat, 21 Nov 2026 23:59:59 -0100\n")
    assert changelog_entries(log) == [("1.2.3", "2026-11-26"), ("1.2.2", "2026-11-21")]
    assert news_entries("# NEWS\n\n## 1.2.3 (2026-11-26)\n\n- Café ☕\n## later\n") == [("1.2.3", "2026-11-26")]


@pytest.mark.skipif(not shutil.which("dpkg-parsechangelog"), reason="needs dpkg-dev")
def test_dpkg_reads_every_entry_without_a_warning():
    proc = subprocess.run(["dpkg-parsechangelog", "-l", str(CHANGELOG), "--all", "-SVersion"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    versions = proc.stdout.split()
    assert versions[0] == __version__
    for newer, older in zip(versions, versions[1:]):
        assert subprocess.run(["dpkg", "--compare-versions", newer, "gt", older]).returncode == 0, \
            f"{newer} is not newer than {older}"


@pytest.mark.parametrize("module,prog", [("nm_scanguard", "scanguardd"),
                                         ("nm_scanguard.cli.scanguardctl", "scanguardctl")])
def test_both_programs_print_it(module, prog):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, f"{prog} {__version__}\n"), proc.stderr


def test_setup_cfg_reads_the_version_from_the_code():
    setup = (REPO / "setup.cfg").read_text(encoding="utf-8")
    assert re.search(r"^version = attr: nm_scanguard.__version__$", setup, re.M)
    assert not re.search(r"^version\s*=\s*\d", (REPO / "pyproject.toml").read_text(), re.M)
