"""The mock's control methods (org.freedesktop.DBus.Mock), which daemon tests rely on.

These have no real counterpart on driver "none" (association, signal, someone else's scan),
so they are tested against the template's documentation instead of the binary.
"""

from __future__ import annotations

import pytest

from nm_scanguard.dbuslib import MessageBus, Variant
from tests.conftest import assert_eventually
from tests.contract.wpaclient import INTERFACE_IFACE, NETWORK_IFACE, WpaClient

NM_BGSCAN = "simple:30:-70:86400"


@pytest.fixture
async def client(wpa_supplicant_mock, system_bus):
    bus = await MessageBus(bus_address=system_bus.address).connect()
    try:
        yield await WpaClient.connect(bus)
    finally:
        bus.disconnect()


async def test_wifi_interface_and_networks(wpa_supplicant_mock, client):
    control = wpa_supplicant_mock.control
    iface = str(control.AddWifiInterface("wlan0"))
    assert await client.get_interface("wlan0") == iface
    assert (await client.get(iface, INTERFACE_IFACE, "Driver")).value == "nl80211"

    with_bgscan = str(control.AddNetworkWithBgscan(iface, "home", NM_BGSCAN))
    locked = str(control.AddNetworkWithBgscan(iface, "locked", ""))
    props = await client.network_properties(with_bgscan)
    assert (props["ssid"], props["bgscan"], props["key_mgmt"]) == ('"home"', f'"{NM_BGSCAN}"',
                                                                    "WPA-PSK")
    assert "bgscan" not in await client.network_properties(locked)
    assert [s.body[0] for s in client.signals_of("NetworkAdded", iface)] == [with_bgscan, locked]


async def test_set_current_network_announces_association(wpa_supplicant_mock, client):
    control = wpa_supplicant_mock.control
    iface = str(control.AddWifiInterface("wlan0"))
    net = str(control.AddNetworkWithBgscan(iface, "home", NM_BGSCAN))

    control.SetCurrentNetwork(iface, net)
    assert (await client.get(iface, INTERFACE_IFACE, "CurrentNetwork")).value == net
    assert (await client.get(iface, INTERFACE_IFACE, "State")).value == "completed"
    assert (await client.get(net, NETWORK_IFACE, "Enabled")).value is True
    await assert_eventually(lambda: client.announced(iface, INTERFACE_IFACE, "CurrentNetwork", net)
                            == {"standard", "legacy"})
    assert client.announced(iface, INTERFACE_IFACE, "State", "completed") == {"standard", "legacy"}

    control.SetCurrentNetwork(iface, "/")
    await assert_eventually(lambda: client.announced(iface, INTERFACE_IFACE, "CurrentNetwork", "/"))
    assert (await client.get(iface, INTERFACE_IFACE, "State")).value == "disconnected"

    control.SetState(iface, "scanning")
    await assert_eventually(lambda: client.announced(iface, INTERFACE_IFACE, "State", "scanning"))


async def test_signal_poll(wpa_supplicant_mock, client):
    control = wpa_supplicant_mock.control
    iface = str(control.AddWifiInterface("wlan0"))
    net = str(control.AddNetworkWithBgscan(iface, "home", NM_BGSCAN))
    control.SetCurrentNetwork(iface, net)

    [reply] = await client.call(iface, INTERFACE_IFACE, "SignalPoll")
    assert reply.signature == "a{sv}", "wpa_supplicant wraps the dict in a variant"
    assert (reply.value["rssi"].signature, reply.value["rssi"].value) == ("i", -50)
    assert reply.value["frequency"].signature == "u"

    control.SetSignal(iface, -81)
    [reply] = await client.call(iface, INTERFACE_IFACE, "SignalPoll")
    assert reply.value["rssi"].value == -81

    control.SetSignalPollFails(iface, True)
    with pytest.raises(Exception) as info:
        await client.call(iface, INTERFACE_IFACE, "SignalPoll")
    assert info.value.type == "org.freedesktop.DBus.Error.Failed"


async def test_scans(wpa_supplicant_mock, client):
    control = wpa_supplicant_mock.control
    iface = str(control.AddWifiInterface("wlan0"))

    control.EmitScanDone(iface)
    await assert_eventually(lambda: client.signals_of("ScanDone", iface))
    assert client.signals_of("ScanDone", iface)[0].body == [True]

    await client.call(iface, INTERFACE_IFACE, "Scan", "a{sv}", [{"Type": Variant("s", "active")}])
    await assert_eventually(lambda: len(client.signals_of("ScanDone", iface)) == 2)
    await assert_eventually(lambda: client.announced(iface, INTERFACE_IFACE, "Scanning", False))
    assert client.announced(iface, INTERFACE_IFACE, "Scanning", True)


async def test_set_calls_are_recorded(wpa_supplicant_mock, client):
    control = wpa_supplicant_mock.control
    iface = str(control.AddWifiInterface("wlan0"))
    net = str(control.AddNetworkWithBgscan(iface, "home", NM_BGSCAN))

    await client.set_network_properties(net, {"bgscan": Variant("s", "")})
    await client.set_network_properties(net, {"bgscan": Variant("s", NM_BGSCAN)})

    sets = control.GetPropertiesSets(net)
    assert [{str(k): str(v) for k, v in s.items()} for s in sets] == [
        {"bgscan": ""}, {"bgscan": NM_BGSCAN}]
    calls = wpa_supplicant_mock.mock_object(net).GetMethodCalls("Set")
    assert [(str(args[0]), str(args[1]), sorted(args[2])) for _, args in calls] == [
        (NETWORK_IFACE, "Properties", ["bgscan"])] * 2


async def test_restart_changes_owner_and_forgets_everything(wpa_supplicant_mock, client):
    wpa_supplicant_mock.control.AddWifiInterface("wlan0")
    before = (await client.call_bus("GetNameOwner", "s", ["fi.w1.wpa_supplicant1"]))[0]
    wpa_supplicant_mock.restart()
    after = (await client.call_bus("GetNameOwner", "s", ["fi.w1.wpa_supplicant1"]))[0]
    assert after != before
    with pytest.raises(Exception) as info:
        await client.get_interface("wlan0")
    assert info.value.type == "fi.w1.wpa_supplicant1.InterfaceUnknown"
