"""Output that cannot be written, or not as it is, ends in one line and an exit status, never a
traceback (nm_scanguard/output.py): standard output on a full disk, closed, or in a locale
whose encoding lacks a character.  The real programs in subprocesses, as a shell runs them."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nm_scanguard.cli.common import json_text
from nm_scanguard import output

REPO = Path(__file__).resolve().parents[3]
CTL = ["-m", "nm_scanguard.cli.scanguardctl"]
DAEMON = ["-m", "nm_scanguard"]
NAMES = ["busy", "Café ☕"]


def run(args: list[str], stdout=subprocess.PIPE, shell_redirect: str = "",
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python3 ARGS`, with standard output as given, or redirected by the shell (`>&-`)."""
    cmd = [sys.executable, *args]
    if shell_redirect:
        cmd = ["sh", "-c", f'exec "$@" {shell_redirect}', "sh", *cmd]
    return subprocess.run(cmd, cwd=REPO, stdout=stdout, stderr=subprocess.PIPE,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, timeout=60)


def conf_file(tmp_path: Path, name: str) -> Path:
    conf = tmp_path / f"{name}.conf"
    conf.write_text(f"# {name}\n[scanguard]\nthreshold_mbit = 2\n", encoding="utf-8")
    return conf


def cases(conf: Path) -> dict[str, list[str]]:
    return {
        "scanguardctl config show": [*CTL, "config", "show", "--config", str(conf)],
        "scanguardd --check-config": [*DAEMON, "--check-config", "-c", str(conf)],
        "scanguardctl --version": [*CTL, "--version"],
        "scanguardctl --help": [*CTL, "--help"],
        "scanguardd --version": [*DAEMON, "--version"],
    }


def prog(case: str) -> str:
    return case.split()[0]


@pytest.mark.parametrize("case", cases(Path("x")))
@pytest.mark.parametrize("name", NAMES)
def test_a_full_disk_is_a_write_error_with_status_1(tmp_path, case, name):
    """`> /dev/full`: every write fails with ENOSPC, as on a full file system.  --help and
    --version included, whose write errors argparse would swallow and exit 0."""
    with open("/dev/full", "w") as full:
        out = run(cases(conf_file(tmp_path, name))[case], stdout=full)
    assert out.returncode == 1
    assert out.stderr.decode() == (f"{prog(case)}: cannot write to standard output: No space "
                                   "left on device\n")


@pytest.mark.parametrize("case", cases(Path("x")))
@pytest.mark.parametrize("name", NAMES)
def test_a_closed_standard_output_is_a_write_error_with_status_1(tmp_path, case, name):
    """`>&-`: Python sets sys.stdout to None; print() would write nothing and say nothing."""
    out = run(cases(conf_file(tmp_path, name))[case], stdout=None, shell_redirect=">&-")
    assert out.returncode == 1
    assert out.stderr.decode() == f"{prog(case)}: cannot write to standard output: it is closed\n"


def test_a_command_that_writes_nothing_does_not_mind_a_closed_standard_output(tmp_path):
    missing = tmp_path / "Café ☕.conf"
    out = run([*CTL, "config", "show", "--config", str(missing)], stdout=None,
              shell_redirect=">&-")
    assert out.returncode == 1
    assert out.stderr.decode().startswith(f"scanguardctl: {missing}: no such file;")
    assert out.stderr.decode().count("\n") == 1


@pytest.mark.parametrize("case", ["scanguardctl config show", "scanguardd --check-config"])
def test_a_locale_without_the_character_gets_an_escape(tmp_path, case):
    """A Latin-1 locale (its encoding stands in for one: `locale -a` may list none) and a file
    named `Café ☕.conf`: é is written in Latin-1, ☕ as \\u2615, the table is whole."""
    conf = conf_file(tmp_path, "Café ☕")
    out = run(cases(conf)[case], env={"PYTHONIOENCODING": "latin-1"})
    assert out.returncode == 0, out.stderr
    assert out.stderr == b""
    text = out.stdout.decode("latin-1")
    assert f"{tmp_path}/Café \\u2615.conf" in text
    assert any(line.split()[:2] == ["threshold_mbit", "2"] for line in text.splitlines())
    assert text.rstrip("\n").splitlines()[-1].split()[0] == "abort_scans"


def test_an_error_in_a_latin_1_locale_is_one_line(tmp_path):
    """Standard error never raises: what Latin-1 lacks is escaped there too."""
    missing = tmp_path / "Café ☕.conf"
    out = run([*CTL, "config", "show", "--config", str(missing)],
              env={"PYTHONIOENCODING": "latin-1"})
    assert out.returncode == 1 and out.stdout == b""
    err = out.stderr.decode("latin-1")
    assert err.startswith(f"scanguardctl: {tmp_path}/Café \\u2615.conf: no such file;")
    assert err.count("\n") == 1


def test_standard_error_closed_is_not_standard_output(tmp_path):
    """`2>&-`: print(file=sys.stderr) with sys.stderr None would write the error to standard
    output, into what a script reads; it goes nowhere, and the exit status still says it."""
    missing = tmp_path / "Café ☕.conf"
    out = subprocess.run(["sh", "-c", 'exec "$@" 2>&-', "sh", sys.executable, *CTL, "config",
                          "show", "--config", str(missing)], cwd=REPO, capture_output=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert (out.returncode, out.stdout) == (1, b"")


@pytest.mark.parametrize("text", ["Café ☕", "😀 and \\u2615", "plain"])
def test_json_in_a_latin_1_locale_reads_back_as_the_same_text(monkeypatch, text):
    """The escape stands for the character inside a JSON string, beyond the BMP too."""
    raw = io.BytesIO()
    latin = io.TextIOWrapper(raw, encoding="latin-1", errors="strict")
    monkeypatch.setattr(sys, "stdout", latin)
    doc = {"reason": text, "n": 1}

    def main() -> int:
        print(json_text(doc))
        return 0

    assert output.run_main("scanguardctl", main) == 0
    latin.flush()
    assert json.loads(raw.getvalue().decode("latin-1")) == doc
