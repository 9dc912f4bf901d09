"""Fixtures for the bus API tests: the real daemon with mocked NetworkManager and wpa_supplicant,
one activated Wi-Fi interface (a veth pair with no traffic), and a client connection."""

from __future__ import annotations

from pathlib import Path
from typing import AsyncIterator, Iterator

import pytest

from tests.api.harness import Link, NetworkManagerMock, Scenario, running_scenario
from tests.conftest import MockSupplicant, PrivateBus, call_failed


@pytest.fixture
def link() -> Iterator[Link]:
    lk = Link()
    try:
        yield lk
    finally:
        lk.remove()


@pytest.fixture
def nm_mock(system_bus: PrivateBus, tmp_path: Path,
            request: pytest.FixtureRequest) -> Iterator[NetworkManagerMock]:
    nm = NetworkManagerMock(system_bus.address, tmp_path / "nm-mock.log")
    try:
        yield nm
    finally:
        nm.close()
        if call_failed(request):
            print(f"--- NetworkManager mock log ---\n{nm.log_path.read_text(errors='replace')}")


@pytest.fixture
async def scenario(system_bus: PrivateBus, wpa_supplicant_mock: MockSupplicant,
                   nm_mock: NetworkManagerMock, link: Link, tmp_path: Path,
                   request: pytest.FixtureRequest) -> AsyncIterator[Scenario]:
    """An activated Wi-Fi connection 'Home' on `link`, NM's bgscan on its network, and
    scanguardd running; waits until the daemon follows the interface."""
    async with running_scenario(system_bus.address, nm_mock, wpa_supplicant_mock, link, tmp_path,
                                request) as s:
        yield s
