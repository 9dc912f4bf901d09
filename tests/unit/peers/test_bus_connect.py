"""One way onto the system bus (peers/bus.py, connect_system) for the daemon, scanguardctl and
diagnose, and what each says when the bus is not there."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nm_scanguard.peers.bus import NoSystemBus, connect_system

REPO = Path(__file__).resolve().parents[3]
NO_BUS = "unix:path=/nonexistent/scanguard-test-bus"


def test_connect_system_names_the_bus_and_what_to_check(monkeypatch):
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", NO_BUS)
    with pytest.raises(NoSystemBus) as caught:
        asyncio.run(connect_system())
    assert str(caught.value).startswith("cannot connect to the system bus (")
    assert str(caught.value).endswith("); is dbus running?")
    assert caught.value.reason and caught.value.reason in str(caught.value)
    assert isinstance(caught.value, ConnectionError)  # what diagnose's caller reports


@pytest.mark.parametrize("argv", [["status"], ["diagnose", "--seconds", "1"]])
def test_scanguardctl_without_a_bus_says_so_and_exits_1(argv):
    env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=NO_BUS, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "nm_scanguard.cli", *argv], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1, proc
    assert "cannot connect to the system bus (" in proc.stderr, proc.stderr
    assert "is dbus running?" in proc.stderr
    assert "Traceback" not in proc.stderr
