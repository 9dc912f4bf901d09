"""Fixtures for the bus API tests: the real daemon with mocked NetworkManager and wpa_supplicant,
one activated Wi-Fi interface (``link``, with no traffic), and a client connection.

``link``, ``nm_mock`` and ``wpa_supplicant_mock`` come from tests/conftest.py."""

from __future__ import annotations

from pathlib import Path
from typing import AsyncIterator

import pytest

from tests.api.harness import Scenario, running_scenario
from tests.conftest import MockSupplicant, PrivateBus
from tests.peers import Link, NetworkManagerMock


@pytest.fixture
async def scenario(system_bus: PrivateBus, wpa_supplicant_mock: MockSupplicant,
                   nm_mock: NetworkManagerMock, link: Link, tmp_path: Path,
                   request: pytest.FixtureRequest) -> AsyncIterator[Scenario]:
    """An activated Wi-Fi connection 'Home' on `link`, NM's bgscan on its network, and
    scanguardd running; waits until the daemon follows the interface."""
    async with running_scenario(system_bus.address, nm_mock, wpa_supplicant_mock, link, tmp_path,
                                request) as s:
        yield s
