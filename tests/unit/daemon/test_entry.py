"""scanguardd's entry point keeps what it never uses out of the process (nm_scanguard/daemon/entry.py):
checked on the real start-up path, as `python3 -m nm_scanguard` runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
# OpenSSL (asyncio's ssl, hashlib's _hashlib), GObject (the D-Bus libraries' GLib glue), the
# netlink library the daemon no longer uses.
NEVER = ("ssl", "_ssl", "_hashlib", "gi", "pyroute2")
# What only later work needs (the journal's JSON, a file written, a hold's cookie, a digest of bad
# profile data, a number in exponent form, systemd's notification, --help's width), imported where
# it is used: loading them is start-up time (entry.py).
LATER = ("json", "tempfile", "secrets", "hashlib", "decimal", "systemd", "shutil")


def loaded_by(*args: str) -> set[str]:
    """The modules in sys.modules (not None) when `python3 -m nm_scanguard ARGS` exits."""
    code = ("import atexit, runpy, sys\n"
            "atexit.register(lambda: print('MODULES', *sorted(k for k, v in sys.modules.items() "
            "if v is not None), file=sys.stderr))\n"
            "sys.argv[0] = 'scanguardd'\n"
            "runpy.run_module('nm_scanguard', run_name='__main__')\n")
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("MODULES ")]
    assert lines, f"no module list from {args}: {out.stderr[-2000:]}"
    return set(lines[-1].split()[1:])


def test_the_daemon_starts_without_openssl_gi_or_pyroute2():
    names = loaded_by("--version")
    assert "nm_scanguard.daemon.service" in names and "asyncio" in names
    loaded = {n for n in names if n.split(".")[0] in NEVER}
    assert not loaded, f"scanguardd imported {sorted(loaded)}"


def test_the_daemon_loads_what_only_later_work_needs_later():
    names = loaded_by("--version")
    assert "nm_scanguard.daemon.bgscan.journal" in names and "nm_scanguard.daemon.api.holds" in names
    loaded = sorted(n for n in LATER if n in names)
    assert not loaded, f"scanguardd's start imported {loaded}"


def test_the_daemon_still_hashes_with_blake2b_without_openssl(tmp_path):
    """profile_settings.py's digest of bad profile data (ProfileWarnings) uses blake2b: built in."""
    code = ("import sys\n"
            "for n in ('ssl', '_ssl', '_hashlib'): sys.modules.setdefault(n, None)\n"
            "from nm_scanguard import profile_settings\n"
            "print(profile_settings._digest('Café ☕', 'x').hex())\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.strip()) == 32


# ---- a reader that has gone (`scanguardctl config show | head -1`) ---------------------------

CLOSED_PIPE_CASES = {
    "scanguardctl --help": ["-m", "nm_scanguard.cli.scanguardctl", "--help"],
    "scanguardctl config show": ["-m", "nm_scanguard.cli.scanguardctl", "config", "--config", "{conf}", "show"],
    "scanguardd --check-config": ["-m", "nm_scanguard", "--check-config", "-c", "{conf}"],
    "scanguardd --help": ["-m", "nm_scanguard", "--help"],
}


@pytest.mark.parametrize("case", CLOSED_PIPE_CASES)
@pytest.mark.parametrize("text", ["busy", "Café ☕"])
def test_output_to_a_closed_pipe_exits_quietly_with_141(tmp_path, case, text):
    """What `| true` or `| head -1` does, made certain: the reading end is closed before the
    program writes, so its first write fails with EPIPE."""
    conf = tmp_path / f"{text}.conf"
    conf.write_text(f"# {text}\n[scanguard]\nthreshold_mbit = 2\n", encoding="utf-8")
    args = [a.replace("{conf}", str(conf)) for a in CLOSED_PIPE_CASES[case]]
    read, write = os.pipe()
    os.close(read)
    try:
        out = subprocess.run([sys.executable, *args], cwd=REPO, stdout=write,
                             stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert out.returncode == 141, out.stderr
    assert out.stderr == ""
