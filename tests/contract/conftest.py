"""What the mock-only contract tests share: a client of the wpa_supplicant mock."""

from __future__ import annotations

import pytest

from nm_scanguard.dbuslib import MessageBus
from tests.contract.wpaclient import WpaClient


@pytest.fixture
async def client(wpa_supplicant_mock, system_bus):
    bus = await MessageBus(bus_address=system_bus.address).connect()
    try:
        yield await WpaClient.connect(bus)
    finally:
        bus.disconnect()
