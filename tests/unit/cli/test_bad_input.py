"""A mistake on scanguardctl's command line is said as one, naming the argument, before the
service or NetworkManager is asked: an argument that is not UTF-8, an unknown key, a value
of the wrong form, a settings file with an error.  The real program in a subprocess, with no
system bus to reach (a test that gets past the check would fail on the bus instead)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nm_scanguard.config import KEYS

REPO = Path(__file__).resolve().parents[3]
KNOWN = f"(known keys: {', '.join(KEYS)})"
CAFE = "Café ☕"
# "Café ☕ " then a byte that is not UTF-8, as a Latin-1 terminal or script would pass "ÿ".
NOT_UTF8 = os.fsdecode("Café ☕ ".encode() + b"\xff")


def ctl(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO),
           "DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={tmp_path}/no-bus"}
    return subprocess.run([sys.executable, "-m", "nm_scanguard.cli.scanguardctl", *args],
                          cwd=REPO, capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("option", ["--reason", "--app-id", "--interface"])
def test_hold_refuses_an_argument_that_is_not_utf_8_naming_it(tmp_path, option):
    """The service's bus carries UTF-8 only: such an argument used to reach the bus library and
    come back as "the system bus connection failed ('utf-8' codec ...)"."""
    ran = tmp_path / "ran"
    r = ctl("hold", option, NOT_UTF8, "--", "touch", str(ran), tmp_path=tmp_path)
    assert r.returncode == 125
    assert r.stderr.splitlines()[-1] == (f"scanguardctl hold: error: argument {option}: not valid "
                                         f"UTF-8 (byte 0xff after '{CAFE} '); write it in UTF-8")
    assert not ran.exists()


def test_the_byte_is_named_where_it_is(tmp_path):
    r = ctl("hold", "--reason", os.fsdecode(b"\xe9t\xe9"), "--", "true", tmp_path=tmp_path)
    assert r.returncode == 125
    assert r.stderr.splitlines()[-1].endswith(
        "argument --reason: not valid UTF-8 (byte 0xe9 at the start); write it in UTF-8")


def test_hold_takes_a_reason_in_utf_8(tmp_path):
    ran = tmp_path / "ran"
    r = ctl("hold", "--reason", CAFE, "--interface", "wlp☕", "--", "touch", str(ran),
            tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert ran.exists()
    assert "running touch without a hold" in r.stderr  # no bus here: the hold is not taken


@pytest.mark.parametrize("args", [("config", "show", NOT_UTF8),
                                  ("config", "set", NOT_UTF8, "threshold_mbit=2"),
                                  ("config", "unset", NOT_UTF8, "threshold_mbit"),
                                  ("diagnose", "--interface", NOT_UTF8)])
def test_profile_and_interface_names_that_are_not_utf_8_are_refused(tmp_path, args):
    """NetworkManager's names are UTF-8: such a name can match nothing."""
    r = ctl(*args, tmp_path=tmp_path)
    assert r.returncode == 2
    name = "--interface" if "--interface" in args else "CONNECTION"
    assert r.stderr.splitlines()[-1] == (
        f"scanguardctl {' '.join(args[:2]) if args[0] == 'config' else 'diagnose'}: error: "
        f"argument {name}: not valid UTF-8 (byte 0xff after '{CAFE} '); write it in UTF-8")


@pytest.mark.parametrize("assignment, message", [
    ("thr=2", f"unknown key 'thr' {KNOWN}"),
    ("threshhold_mbit=2", f"unknown key 'threshhold_mbit'; did you mean threshold_mbit? {KNOWN}"),
    (f"threshold_mbit={CAFE}", f"profile '{CAFE}': threshold_mbit = '{CAFE}' is not valid; "
                               "expected a number of Mbit/s from 0 to 100000"),
    ("enabled", "'enabled' is not KEY=VALUE (e.g. threshold_mbit=5)"),
])
def test_config_set_checks_keys_and_values_before_asking_networkmanager(tmp_path, assignment,
                                                                        message):
    """No NetworkManager here: the mistake is said, not "cannot talk to NetworkManager"."""
    r = ctl("config", "set", CAFE, "abort_scans=no", assignment, tmp_path=tmp_path)
    assert r.returncode == 1
    assert r.stderr == f"scanguardctl: {message}\n"


@pytest.mark.parametrize("name", ["bad", CAFE])
def test_config_show_refuses_a_bad_file_as_check_config_does(tmp_path, name):
    """Both say the same error and exit 1; neither shows the built-in defaults as if in force."""
    conf = tmp_path / f"{name}.conf"
    conf.write_text(f"[scanguard]\nsample_interval = {name}\n", encoding="utf-8")
    error = (f"{conf} [scanguard]: sample_interval = '{name}' is not valid; expected a number "
             "of seconds from 0.1 to 60")
    check = subprocess.run([sys.executable, "-m", "nm_scanguard", "--check-config", "-c", str(conf)],
                           cwd=REPO, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    assert (check.returncode, check.stdout, check.stderr) == (1, "", f"scanguardd: {error}\n")
    for args in (("config", "show", "--config", str(conf)),
                 ("config", "--config", str(conf), "show", CAFE)):
        r = ctl(*args, tmp_path=tmp_path)
        assert (r.returncode, r.stdout, r.stderr) == (1, "", f"scanguardctl: {error}\n"), args
