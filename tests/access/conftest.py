"""A system bus as strict as a real one: Debian's default-deny policy plus the D-Bus policy file
we ship, polkit mocked by python-dbusmock, and clients run as user nobody."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest

from tests.api.harness import Scenario, running_scenario
from tests.conftest import (DEFAULT_DENY_POLICY, MockSupplicant, PrivateBus, start_private_bus,
                            stop_process, yield_and_close)
from tests.peers import REPO, Link, NetworkManagerMock, Polkit, env_for

SHIPPED_POLICY = REPO / "systemd" / "io.github.nm_scanguard.ScanGuard1.conf"

# On a real system NetworkManager, wpa_supplicant and polkitd (all root) have policy files of
# their own.  Root stands in for them here, and for the service user 'scanguard', which a test
# host does not have: test_bus_policy.py checks separately that the shipped file lets only that
# user own our name, and that nobody else can.
ROOT_POLICY = """
  <policy user="root">
    <allow own="*"/>
    <allow send_destination="*"/>
  </policy>"""


@pytest.fixture
def strict_bus(monkeypatch: pytest.MonkeyPatch) -> Iterator[PrivateBus]:
    bus = start_private_bus(DEFAULT_DENY_POLICY + ROOT_POLICY, includes=[SHIPPED_POLICY])
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.address)
    try:
        yield bus
    finally:
        bus.stop()


@pytest.fixture
def polkit(strict_bus: PrivateBus, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Polkit]:
    yield from yield_and_close(Polkit(strict_bus.address, tmp_path / "polkit-mock.log"), request,
                               "polkit mock log")


@contextlib.asynccontextmanager
async def scenario_on(bus: PrivateBus, link: Link, tmp_path: Path,
                      request: pytest.FixtureRequest) -> AsyncIterator[Scenario]:
    """NetworkManager's and wpa_supplicant's mocks on `bus` and the daemon following `link`
    (whichever polkit the caller started)."""
    nm = wpa = None
    try:
        nm = NetworkManagerMock(bus.address, tmp_path / "nm-mock.log")
        wpa = MockSupplicant(bus.address, tmp_path / "wpa-mock.log")
        async with running_scenario(bus.address, nm, wpa, link, tmp_path, request) as s:
            yield s
    finally:
        for mock in (wpa, nm):
            if mock is not None:
                mock.close()


@pytest.fixture
async def strict_scenario(strict_bus: PrivateBus, polkit: Polkit, link: Link, tmp_path: Path,
                          request: pytest.FixtureRequest) -> AsyncIterator[Scenario]:
    async with scenario_on(strict_bus, link, tmp_path, request) as s:
        yield s


class Nobody:
    """tests/access/client.py running as user nobody: one call per request, answers as dicts."""

    def __init__(self, address: str) -> None:
        env = env_for(address)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        self.process = subprocess.Popen(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable,
             str(Path(__file__).parent / "client.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=REPO, text=True)
        first = self.process.stdout.readline()
        if not first:
            raise RuntimeError("the unprivileged client did not connect to the bus")
        self.unique_name = json.loads(first)["unique_name"]

    def request(self, **req: Any) -> dict[str, Any]:
        self.process.stdin.write(json.dumps(req) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def call(self, member: str, sig: str = "", body: list | None = None,
             iface: str = "io.github.nm_scanguard.ScanGuard1",
             dest: str = "io.github.nm_scanguard.ScanGuard1",
             path: str = "/io/github/nm_scanguard/ScanGuard1") -> dict[str, Any]:
        return self.request(dest=dest, path=path, iface=iface, member=member, sig=sig,
                            body=body or [])

    def close(self) -> None:
        stop_process(self.process)


@pytest.fixture
def nobody(strict_bus: PrivateBus) -> Iterator[Any]:
    """A factory of unprivileged clients; every one is stopped at the end."""
    clients: list[Nobody] = []

    def make() -> Nobody:
        clients.append(Nobody(strict_bus.address))
        return clients[-1]

    try:
        yield make
    finally:
        for c in clients:
            c.close()
