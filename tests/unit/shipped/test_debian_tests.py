"""debian/tests (autopkgtest) and how the package VM runs it and finds the previous release
(tests/lab/package_vm.py; issue 34, items 11 and the autopkgtest): the control file names an
executable POSIX sh script for each test, the D-Bus test runs files that exist, and the previous
release is the newest released debian/changelog entry below the top one (an UNRELEASED ~dev
entry is not a release: issue 50, item 3), built from the last commit that had it on top."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.lab.package_vm import dep8_tests, previous_release

REPO = Path(__file__).resolve().parents[3]
TESTS = REPO / "debian" / "tests"


def test_every_test_has_an_executable_script_that_sh_parses():
    stanzas = dep8_tests()
    names = [n for s in stanzas for n in s["tests"]]
    assert {"check-config", "cli", "dbus-api"} <= set(names), names
    for stanza in stanzas:
        assert ["@"] in stanza["depends"], f"{stanza['tests']} does not depend on the package"
    for name in names:
        script = TESTS / name
        assert script.is_file() and os.access(script, os.X_OK), f"debian/tests/{name}"
        assert script.read_text(encoding="utf-8").startswith("#!/bin/sh\n")
        proc = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


def test_the_dbus_test_runs_files_and_tests_that_exist():
    text = (TESTS / "dbus-api").read_text(encoding="utf-8")
    files = re.findall(r"\btests/[\w/]+\.py\b", text)
    assert files and all((REPO / f).is_file() for f in files), files
    for name in re.findall(r"not (test_\w+)", text):
        assert any(re.search(rf"^(async )?def {name}\(", (REPO / f).read_text(), re.M) for f in files), name
    stanza = next(s for s in dep8_tests() if "dbus-api" in s["tests"])
    assert "needs-root" in stanza["restrictions"]  # a veth link and a network namespace


def test_the_control_parser_reads_continuations_alternatives_and_comments(tmp_path):
    control = tmp_path / "control"
    control.write_text("# Café ☕\nTests: a, b\nDepends: @,\n python3-x (>= 2) | python3-y,\n"
                       " z\nRestrictions: needs-root,\n allow-stderr\n\n\nTests: c\n"
                       "Depends: @\n", encoding="utf-8")
    assert dep8_tests(control) == [
        {"tests": ["a", "b"], "depends": [["@"], ["python3-x", "python3-y"], ["z"]],
         "restrictions": ["needs-root", "allow-stderr"]},
        {"tests": ["c"], "depends": [["@"]], "restrictions": []}]


ENTRY = "nm-scanguard ({v}) unstable; urgency=medium\n\n  * {text}\n\n -- A B <a@b>  Thu, 26 Nov 2026 10:00:00 +0000\n\n"
DEV = ENTRY.replace(") unstable;", ") UNRELEASED;")


@pytest.mark.skipif(not shutil.which("git"), reason="needs git")
def test_the_previous_release_is_the_commit_before_the_new_entry(tmp_path):
    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              cwd=tmp_path, check=True, capture_output=True, text=True).stdout.strip()

    def commit(changelog: str, message: str) -> str:
        (tmp_path / "debian" / "changelog").write_text(changelog, encoding="utf-8")
        (tmp_path / "f").write_text(message, encoding="utf-8")
        git("add", "-A")
        git("commit", "-q", "-m", message)
        return git("rev-parse", "HEAD")

    git("init", "-q")
    (tmp_path / "debian").mkdir()
    old = ENTRY.format(v="0.1.0", text="Initial release.")
    commit(old, "0.1.0")
    last_old = commit(old, "work on 0.1.0, Café ☕")
    # This tree's entry not committed yet: the previous release is HEAD.
    (tmp_path / "debian" / "changelog").write_text(ENTRY.format(v="0.2.0", text="x") + old)
    assert previous_release(tmp_path) == ("0.1.0", last_old)
    commit(ENTRY.format(v="0.2.0", text="x") + old, "release 0.2.0")
    last_020 = commit(ENTRY.format(v="0.2.0", text="x, more") + old, "after the release")
    assert previous_release(tmp_path) == ("0.1.0", last_old)

    # Development after 0.2.0 under an UNRELEASED 0.3.0~dev entry: the previous release is 0.2.0,
    # not the entry below the top by position alone, and stays so as the ~dev entry grows and when
    # the release replaces it.
    released = ENTRY.format(v="0.2.0", text="x, more") + old
    (tmp_path / "debian" / "changelog").write_text(DEV.format(v="0.3.0~dev", text="Café ☕") + released)
    assert previous_release(tmp_path) == ("0.2.0", last_020)
    commit(DEV.format(v="0.3.0~dev", text="Café ☕") + released, "open 0.3.0~dev")
    commit(DEV.format(v="0.3.0~dev", text="Café ☕, more") + released, "work on 0.3.0~dev")
    assert previous_release(tmp_path) == ("0.2.0", last_020)
    commit(ENTRY.format(v="0.3.0", text="y") + released, "release 0.3.0")
    assert previous_release(tmp_path) == ("0.2.0", last_020)
    # Two UNRELEASED entries on top (one left by mistake): still the last release.
    (tmp_path / "debian" / "changelog").write_text(
        DEV.format(v="0.4.0~dev", text="z") + DEV.format(v="0.3.0~dev", text="z") + released)
    assert previous_release(tmp_path) == ("0.2.0", last_020)
