"""Fixtures for the daemon's D-Bus tests: the daemon's own code in the test's event loop, against
NetworkManager and wpa_supplicant mocks (tests/peers.py) and a veth pair (``link``, from
tests/conftest.py) to push real traffic through."""

from __future__ import annotations

import time

import pytest

from nm_scanguard.dbuslib import BusType, MessageBus
from tests.conftest import assert_eventually
from tests.peers import Peers


@pytest.fixture
async def bus(system_bus):
    b = await MessageBus(bus_type=BusType.SYSTEM).connect()
    yield b
    b.disconnect()


@pytest.fixture
def peers(bus, link, wpa_supplicant_mock, nm_mock):
    return Peers(bus, link.ifname, wpa_supplicant_mock, nm_mock)


async def eventually(cond, timeout=10.0, what="condition") -> float:
    """assert_eventually, returning how long it took (the figures in the closing note)."""
    start = time.monotonic()
    await assert_eventually(cond, timeout, 0.05, what)
    return time.monotonic() - start


FIGURES: dict[str, list[float]] = {}


def record(what: str, seconds: float) -> None:
    FIGURES.setdefault(what, []).append(seconds)


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.section("figures (sample_interval 0.2 s, engage_after 2, release_after 1 s)")
        for what, values in FIGURES.items():
            terminalreporter.write_line(f"{what}: n={len(values)} min={min(values):.2f} s "
                                        f"max={max(values):.2f} s")
