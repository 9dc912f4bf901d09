"""`systemctl reload scanguard` fails, with the reason, when the settings file is bad (issue 34,
item 7).

systemd runs a unit's ExecReload= lines in order and stops at the first that fails; so the unit
checks the file with the daemon's own program and arguments (`scanguardd --check-config`, as the
service user in the same sandbox) before it sends SIGHUP.  The package VM
(tests/lab/package_vm.py, `reload_check`) runs it on a booted system."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
UNIT = REPO / "systemd" / "scanguard.service"


def service_lines(text: str) -> list[tuple[str, str]]:
    """(key, value) of each assignment in [Service], in order; repeated keys kept (systemd
    allows them, configparser does not)."""
    out, section = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            key, _, value = line.partition("=")
            out.append((key.strip(), value.strip()))
    return out


def test_reload_checks_the_file_the_daemon_reads_before_it_signals():
    lines = service_lines(UNIT.read_text(encoding="utf-8"))
    (start,) = [v for k, v in lines if k == "ExecStart"]
    reload = [v for k, v in lines if k == "ExecReload"]
    # Same program, same arguments (so the same -c FILE, if any), plus --check-config; no "-"
    # prefix, which would make systemd ignore its failure.
    assert reload == [f"{start} --check-config", "/bin/kill -HUP $MAINPID"], reload
    assert "--check-config" not in shlex.split(start)


def test_the_parser_of_the_unit_keeps_repeated_keys_in_order():
    text = "[Unit]\nExecReload=no\n[Service]\n# c\nExecReload=a b\nUser=x\nExecReload = c\n"
    assert service_lines(text) == [("ExecReload", "a b"), ("User", "x"), ("ExecReload", "c")]


@pytest.mark.parametrize("value", ["fast", "Café ☕"])
def test_check_config_fails_on_a_bad_file_and_says_which_key(tmp_path, value):
    """What the first ExecReload= line does with a bad file: a non-zero exit and the key named
    on stderr, which systemd puts in the journal and `systemctl status`."""
    bad = tmp_path / "scanguard.conf"
    bad.write_text(f"[scanguard]\nthreshold_mbit = {value}\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "nm_scanguard", "--check-config", "-c", str(bad)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode != 0, proc.stdout
    assert "threshold_mbit" in proc.stderr, proc.stderr
    good = tmp_path / "good.conf"
    good.write_text("[scanguard]\nthreshold_mbit = 5\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "nm_scanguard", "--check-config", "-c", str(good)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
