"""scanguardctl's bash completion (completion/bash_completion.py), run in bash as <Tab> runs it:
the verbs, actions and options it offers are build_parser()'s, profile names come from nmcli
(a stand-in here) and are quoted for the command line, KEY=VALUE offers the settings' keys."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nm_scanguard.cli.scanguardctl import build_parser
from nm_scanguard.config import KEYS

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "completion"))
import bash_completion  # noqa: E402

PROFILES = ["Home", "Café ☕", "work:vpn", "it's $(here)"]
NMCLI = r"""#!/bin/sh
case "$*" in
    "-t -f NAME connection show") printf '%s\n' Home 'Café ☕' 'work\:vpn' "it's \$(here)" ;;
    "-t -f DEVICE,TYPE device") printf '%s\n' wlan0:wifi eth0:ethernet 'wlé1:wifi' lo:loopback ;;
    *) exit 2 ;;
esac
"""


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("completion")
    path = d / "scanguardctl"
    path.write_text(bash_completion.generate(build_parser()), encoding="utf-8")
    bin_dir = d / "bin"
    bin_dir.mkdir()
    (bin_dir / "nmcli").write_text(NMCLI)
    (bin_dir / "nmcli").chmod(0o755)
    (d / "files").mkdir()
    (d / "files" / "Café ☕.conf").write_text("")
    return path


def comp_words(line: str) -> list[str]:
    """The words bash gives a completion function for `line`: split at blanks, and at '='
    (in COMP_WORDBREAKS) into the text before, '=' and the text after."""
    words = []
    for word in line.split(" "):
        words += [part for part in re.split("(=)", word) if part] or [""]
    return words


def complete(script: Path, line: str, unquote: bool = True) -> list[str]:
    """COMPREPLY for the command line `line` (the cursor at its end), each reply read back
    as the shell would read it (a reply is quoted for the command line), or as it is."""
    show = "eval \"printf '%s\\n' $reply\"" if unquote else "printf '%s\\n' \"$reply\""
    code = (f"source {script}\n"
            "COMP_WORDS=(\"$@\")\n"
            "COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n"
            "_scanguardctl\n"
            f"for reply in \"${{COMPREPLY[@]}}\"; do {show}; done\n")
    env = {"PATH": f"{script.parent / 'bin'}:/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
    out = subprocess.run(["bash", "-c", code, "bash", *comp_words(line)], env=env,
                         cwd=script.parent / "files", capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    return out.stdout.splitlines()


def parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    return bash_completion.walk(build_parser())


def test_every_metavar_has_a_kind():
    """A new option's value must be said here how to complete (even as "text")."""
    unknown = {bash_completion.metavar(a) for _, p in parsers() for a in p._actions
               if (a.option_strings and a.nargs != 0 or not a.option_strings)
               and not isinstance(a, argparse._SubParsersAction)} - set(bash_completion.KINDS)
    assert not unknown, f"add to completion/bash_completion.py KINDS: {sorted(unknown)}"


def test_the_verbs_are_the_parser_s(script):
    verbs = list(bash_completion.subparsers(build_parser()))
    assert "reload" in verbs and "hold" in verbs
    assert complete(script, "scanguardctl ") == verbs
    assert complete(script, "scanguardctl con") == ["config"]
    assert complete(script, "scanguardctl config ") == ["show", "set", "unset"]
    assert complete(script, "scanguardctl --version ") == verbs


@pytest.mark.parametrize("path", [path for path, _ in parsers()])
def test_each_verb_offers_exactly_its_own_options(script, path):
    parser = dict(parsers())[path]
    expected = [o for a in parser._actions for o in a.option_strings]
    assert complete(script, f"scanguardctl {path} -".replace("  ", " ")) == expected


def test_profile_names_come_from_nmcli_and_are_quoted(script):
    assert complete(script, "scanguardctl config set ") == PROFILES
    quoted = complete(script, "scanguardctl config set ", False)
    assert quoted[1] != "Café ☕" and quoted[3] != "it's $(here)"  # quoted for the shell
    assert complete(script, "scanguardctl config show Ca") == ["Café ☕"]
    assert complete(script, "scanguardctl config --config /etc/x.conf unset w") == ["work:vpn"]
    assert complete(script, "scanguardctl config show Home ") == []  # one profile at most


def test_settings_keys_and_the_values_of_keys_that_take_words(script):
    assert complete(script, "scanguardctl config set Home ") == [f"{k}=" for k in KEYS]
    assert complete(script, "scanguardctl config set Café☕ release_after=30 thr") == [
        "threshold_mbit=", "threshold_pps="]
    assert complete(script, "scanguardctl config set Home enabled=") == ["yes", "no"]
    assert complete(script, "scanguardctl config set Home abort_scans=n") == ["no"]
    assert complete(script, "scanguardctl config set Home threshold_mbit=") == []
    assert complete(script, "scanguardctl config set Home roam_scans=") == ["targeted", "full"]
    assert complete(script, "scanguardctl config set Café☕ roam_scans=f") == ["full"]
    assert complete(script, "scanguardctl config set Home roam_scans=Café☕") == []
    assert complete(script, "scanguardctl config unset Home th") == [
        "threshold_mbit", "threshold_pps"]


def test_option_values(script):
    # file names as they are: readline quotes them (-o filenames)
    assert complete(script, "scanguardctl config show --config Ca", False) == ["Café ☕.conf"]
    assert complete(script, "scanguardctl config show --config=Ca", False) == ["Café ☕.conf"]
    assert complete(script, "scanguardctl hold --interface ") == ["wlan0", "wlé1"]
    assert complete(script, "scanguardctl diagnose --interface w") == ["wlan0", "wlé1"]
    assert complete(script, "scanguardctl hold --reason ") == []
    # the option's value is not taken for a positional
    assert complete(script, "scanguardctl config set --config x.conf ") == PROFILES


def test_hold_completes_a_command_after_its_options(script):
    assert "sleep" in complete(script, "scanguardctl hold -- sle")
    assert "sleep" in complete(script, "scanguardctl hold --reason 'x' --strict sle")
    assert complete(script, "scanguardctl hold -- cat Ca", False) == ["Café ☕.conf"]
    assert complete(script, "scanguardctl hold --str") == ["--strict"]


def test_history_since_offers_the_common_times(script):
    assert complete(script, "scanguardctl hist") == ["history"]
    assert complete(script, "scanguardctl history --since ") == ["today", "yesterday", "-1h", "-24h"]
    assert complete(script, "scanguardctl history --since -") == ["-1h", "-24h"]
    assert complete(script, "scanguardctl history --since=y") == ["yesterday"]
    assert complete(script, "scanguardctl history --") == ["--help", "--since", "--json"]
