"""How scanguardctl tells a masked scanguard.service (nm_scanguard/cli/off.py): what `systemctl
is-enabled` answers, and nothing where it cannot answer (no systemctl, no answer in time), so
that an unreachable service is then said to be not running, as before."""

from __future__ import annotations

import time

import pytest

from nm_scanguard.cli import off
from nm_scanguard.cli.common import explain
from nm_scanguard.peers.bus import BusError

NO_OWNER = "org.freedesktop.DBus.Error.NameHasNoOwner"


def systemctl(tmp_path, monkeypatch, script: str) -> None:
    tool = tmp_path / "systemctl"
    tool.write_text(f"#!/bin/sh\n{script}\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))


@pytest.mark.parametrize("answer,masked", [("masked", True), ("masked-runtime", True),
                                           ("enabled", False), ("static", False),
                                           ("Café ☕", False)])
def test_what_systemctl_is_enabled_says(tmp_path, monkeypatch, answer, masked):
    systemctl(tmp_path, monkeypatch,
              f'[ "$*" = "is-enabled scanguard.service" ] && echo "{answer}"; exit 1')
    assert off.masked() is masked
    failure = explain(BusError(NO_OWNER, "Could not activate remote peer"))
    if masked:
        assert (str(failure), failure.code) == (off.MASKED, off.OFF_EXIT)
    else:
        assert str(failure).startswith("the scanguard service is not running") and failure.code == 1


def test_no_systemctl_or_no_answer_is_not_masked(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert off.masked() is False
    systemctl(tmp_path, monkeypatch, "exec /bin/sleep 5")  # systemd does not answer
    monkeypatch.setattr(off, "SYSTEMCTL_TIMEOUT", 0.2)
    began = time.monotonic()
    assert off.masked() is False
    assert time.monotonic() - began < 2


def test_dbus_daemons_unit_masked_error_needs_no_systemctl(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    failure = explain(BusError(off.UNIT_MASKED, "Unit scanguard.service is masked."))
    assert (str(failure), failure.code) == (off.MASKED, off.OFF_EXIT)
    assert str(failure) == ("nm-scanguard is off: scanguard.service is masked (systemctl unmask "
                            "scanguard to turn it back on)")
