"""Contract: the model rung's simulated wpa_supplicant answers like the real binary, too.

tests/model/peers.py simulates wpa_supplicant for the model rung.  Here it runs the contract's
scenarios (tests/contract/wpa_scenarios.py), the ones the real ``/sbin/wpa_supplicant`` and the
D-Bus mock pass in test_wpa_supplicant_contract.py, so that it cannot drift from the binary
either.  Each scenario gets a fresh simulated bus (tests/model/bus.py) with only the model's
wpa_supplicant on it, on virtual time (tests/model/clock.py): no process, no socket, no root,
and the same order of events on every run.  The client is the contract's WpaClient on a
connection of that bus; what NetworkManager does to wpa_supplicant (CreateInterface,
AddNetwork, SelectNetwork, RemoveNetwork, RemoveInterface) goes to the model's entry points for
it, the ones the model's NetworkManager calls.  A scenario about something the model leaves
out on purpose (its ``model_differs``, the reason) runs as xfail(strict=True): it must fail.
"""

from __future__ import annotations

import pytest

from tests.contract.wpa_scenarios import SCENARIOS, Scenario
from tests.contract.wpaclient import WpaClient
from tests.model.bus import SimBus
from tests.model.clock import VirtualTimeLoop, use_virtual_time
from tests.model.peers import Net, Supplicant, WpaIface


class ModelClient(WpaClient):
    """A WpaClient on the simulated bus; NetworkManager's calls go to `model` directly."""

    model: Supplicant

    def _iface(self, path: str) -> WpaIface:
        return next(i for i in self.model.ifaces.values() if i.path == path)

    def _net(self, iface: WpaIface, path: str) -> Net:
        return next(n for n in iface.nets.values() if n.path == path)

    async def _delivered(self) -> None:
        """What the model has sent so far has reached us, as a real call's signals arrive
        before its reply: the bus delivers in order, so a round trip through it is enough."""
        await self.has_owner()

    async def create_interface(self, ifname: str, driver: str = "none") -> str:
        path = self.model.add_interface(ifname).path
        await self._delivered()
        return path

    async def add_network(self, iface: str, **values: str) -> str:
        path = self.model.new_network(self._iface(iface), values.get("bgscan")).path
        await self._delivered()
        return path

    async def select_network(self, iface: str, net: str) -> None:
        wpa_iface = self._iface(iface)
        self.model.select(wpa_iface, self._net(wpa_iface, net))
        await self._delivered()

    async def remove_network(self, iface: str, net: str) -> None:
        wpa_iface = self._iface(iface)
        self.model.remove_network(wpa_iface, self._net(wpa_iface, net))
        await self._delivered()

    async def remove_interface(self, iface: str) -> None:
        self.model.remove_interface(self._iface(iface).ifname)
        await self._delivered()


async def _run(loop: VirtualTimeLoop, scenario: Scenario) -> None:
    events: list[str] = []
    model = Supplicant(SimBus(loop), events.append)
    model.start()
    client = await ModelClient.connect(model.bus.connect(uid=0, owner="contract"))
    client.model, client.kind = model, "model"
    client.iface = await client.create_interface("lo")
    try:
        await scenario.run(client)
    except BaseException as e:
        e.add_note(f"the model wpa_supplicant's events: {' '.join(events) or 'none'}")
        raise


def _on_the_model(scenario: Scenario) -> object:
    marks = [pytest.mark.xfail(strict=True, reason=scenario.model_differs)] \
        if scenario.model_differs else []
    return pytest.param(scenario, id=scenario.name, marks=marks)


@pytest.mark.parametrize("scenario", [_on_the_model(s) for s in SCENARIOS])
def test_model_scenario(scenario: Scenario) -> None:
    loop = VirtualTimeLoop()
    try:
        with use_virtual_time(loop):
            loop.run_until_complete(_run(loop, scenario))
    finally:
        loop.close()
