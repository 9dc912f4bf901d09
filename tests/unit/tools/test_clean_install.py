"""tests/debian_roots/clean_install.py: the clean-machine rung runs the README's install commands as
written, and checks the files where systemd/README.md says they go."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]


def _load() -> ModuleType:
    """tests/debian_roots is a directory of scripts, not a package: load the module by its path."""
    path = REPO / "tests" / "debian_roots" / "clean_install.py"
    spec = importlib.util.spec_from_file_location("clean_install", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("clean_install", module)  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


ci = _load()


def test_the_readme_install_block_is_what_the_rung_runs():
    commands = ci.readme_install_commands((REPO / "README.md").read_text(encoding="utf-8"))
    assert commands[0].startswith("apt install ") and set(ci.USER_PACKAGES) <= set(commands[0].split()[2:]), \
        "the README's first command installs what the bare root has, and nothing more is assumed"
    assert commands[-2:] == ["make deb", "apt install ../nm-scanguard_*_all.deb"]
    local = ci.local_commands(commands, "/src")
    assert "git clone -q /src nm-scanguard" in local
    assert [c for c in local if "clone" not in c] == [c for c in commands if "clone" not in c]


@pytest.mark.parametrize("clone, expected", [
    ("git clone https://example.org/x.git", "git clone -q /src nm-scanguard"),
    ("git clone https://example.org/x.git Café☕", "git clone -q /src Café☕"),
])
def test_the_clone_alone_is_replaced(clone, expected):
    readme = (f"# x\n\n{ci.INSTALL_HEADING}\n\ntext\n\n```sh\n{clone}   # get it\n\n"
              "cd x\nmake deb  # build\n```\n\n```sh\nnot this\n```\n")
    assert ci.local_commands(ci.readme_install_commands(readme), "/src") == [expected, "cd x", "make deb"]


@pytest.mark.parametrize("readme", ["# x\n", f"# x\n\n{ci.INSTALL_HEADING}\n\nno block\n",
                                    f"# x\n\n{ci.INSTALL_HEADING}\n\n```sh\nmake deb\n```\n"])
def test_a_readme_without_the_install_commands_is_refused(readme):
    with pytest.raises(ValueError):
        ci.readme_install_commands(readme)


def test_the_table_names_every_file_the_package_test_checks():
    """systemd/README.md's table and tests/package/test_package.py's INSTALLED list the same
    files: the user-facing document cannot leave one out."""
    from tests.package.test_package import INSTALLED

    table = {path for path, _ in ci.installed_paths((REPO / "systemd" / "README.md").read_text("utf-8"))}
    python_files = {p for p in INSTALLED if "/dist-packages/" in p or p.endswith("/copyright")}
    for path in INSTALLED:
        if path in python_files:
            continue
        assert path.removeprefix(".") in table or path.removeprefix(".").replace("/usr/lib/systemd",
                                                                                 "/lib/systemd") in table, path


def test_a_path_marked_with_a_release_is_checked_there_only():
    table = ("| a | b | c |\n|---|---|---|\n"
             "| `x` | `/lib/u` (Debian 12), `/usr/lib/u` (Debian 13) | unit |\n"
             "| `y` | `/usr/bin/a`, `/usr/bin/b` | both |\n")
    assert ci.installed_paths(table) == [("/lib/u", 12), ("/usr/lib/u", 13), ("/usr/bin/a", None),
                                         ("/usr/bin/b", None)]
    assert ci.debian_major("12.11") == 12 and ci.debian_major("trixie/sid") == 99


def test_the_version_is_the_changelogs_top_entry():
    assert ci.changelog_version("nm-scanguard (1.2.3~dev) UNRELEASED; urgency=medium\n") == "1.2.3~dev"
    with pytest.raises(ValueError):
        ci.changelog_version("other (1) unstable; urgency=low\n")


def test_the_upgrade_keeps_a_non_ascii_edit():
    script = ci.upgrade_script("0" * 40, "0.1.0", "nm-scanguard_0.2.0_all.deb")
    assert "Café ☕" in ci.EDIT and ci.EDIT in script
    assert "--force-confold" in script and "DEB_BUILD_OPTIONS=nocheck" in script


def test_autopkgtest_summary_and_the_tests_it_must_name():
    summary = "check-config         PASS\ncli                  PASS\ndbus-api             FAIL non-zero exit status 1\n"
    assert ci.autopkgtest_results(summary) == {"check-config": "PASS", "cli": "PASS",
                                               "dbus-api": "FAIL non-zero exit status 1"}
    assert [t for stanza in ci.dep8_names() for t in stanza] == ["check-config", "cli", "dbus-api"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
