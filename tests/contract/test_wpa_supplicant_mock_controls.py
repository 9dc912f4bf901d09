"""The mock's control methods (org.freedesktop.DBus.Mock), which daemon tests rely on.

These have no real counterpart on driver "none" (association, signal, someone else's scan),
so they are tested against the template's documentation instead of the binary.
"""

from __future__ import annotations

import asyncio

import pytest

from nm_scanguard.dbuslib import MessageBus, Variant
from tests.conftest import assert_eventually
from tests.contract.wpaclient import INTERFACE_IFACE, NETWORK_IFACE, WpaClient, error_of

NM_BGSCAN = "simple:30:-70:86400"


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


async def test_long_scans_abort_scan_and_its_hang(wpa_supplicant_mock, client):
    """StartScan/SetScanDuration, AbortScan as 2.10 answers it (the lab checks the real one
    with a radio), and SetAbortHang."""
    control = wpa_supplicant_mock.control
    iface = str(control.AddWifiInterface("wlan0"))
    control.SetScanDuration(iface, 60_000)
    control.StartScan(iface)
    await assert_eventually(lambda: client.announced(iface, INTERFACE_IFACE, "Scanning", True))
    assert (await client.get(iface, INTERFACE_IFACE, "Scanning")).value is True
    err = await error_of(client.call(iface, INTERFACE_IFACE, "Scan", "a{sv}",
                                      [{"Type": Variant("s", "active")}]))
    assert (err.type, err.text) == (INTERFACE_IFACE + ".ScanError", "Scan request rejected")

    await client.call(iface, INTERFACE_IFACE, "AbortScan")
    await assert_eventually(lambda: client.signals_of("ScanDone", iface))
    assert client.signals_of("ScanDone", iface)[0].body == [True]  # its requester sees it done
    await assert_eventually(lambda: client.announced(iface, INTERFACE_IFACE, "Scanning", False))
    err = await error_of(client.call(iface, INTERFACE_IFACE, "AbortScan"))
    assert (err.type, err.text) == (INTERFACE_IFACE + ".ScanError",
                                    "Abort failed or no scan in progress")

    control.StartScan(iface)
    control.SetAbortHang(True)
    pending = asyncio.ensure_future(client.call(iface, INTERFACE_IFACE, "AbortScan"))
    await asyncio.sleep(0.3)
    assert not pending.done() and (await client.get(iface, INTERFACE_IFACE, "Scanning")).value
    control.SetAbortHang(False)
    await asyncio.wait_for(pending, 5)
    assert (await client.get(iface, INTERFACE_IFACE, "Scanning")).value is False


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


# ---- injected faults: SetSetDelay, SetHang, SetFailNext -------------------------------------

async def _network(control, client):
    iface = str(control.AddWifiInterface("wlan0"))
    net = str(control.AddNetworkWithBgscan(iface, "home", NM_BGSCAN))
    control.SetCurrentNetwork(iface, net)
    return iface, net


def _elapsed(loop, start):
    return loop.time() - start


async def test_set_delay_applies_at_once_and_answers_late(wpa_supplicant_mock, client):
    import asyncio

    control = wpa_supplicant_mock.control
    _, net = await _network(control, client)
    control.SetSetDelay(600)
    assert control.GetFaults()["set_delay_ms"] == 600
    loop = asyncio.get_running_loop()
    start = loop.time()
    pending = asyncio.ensure_future(client.set_network_properties(net, {"bgscan": Variant("s", "")}))
    # Applied before the reply: a second connection reads the new value meanwhile.
    await assert_eventually(lambda: '"' * 2 == control_bgscan(wpa_supplicant_mock, net), timeout=0.5)
    assert not pending.done()
    await pending
    assert _elapsed(loop, start) >= 0.6
    # Gets and other objects are not delayed; a Set that fails still fails (late).
    start = loop.time()
    await client.network_properties(net)
    assert _elapsed(loop, start) < 0.5
    with pytest.raises(Exception) as info:
        await client.set_network_properties(net, {"nonsense": Variant("s", "x")})
    assert info.value.type == "org.freedesktop.DBus.Error.InvalidArgs"
    assert _elapsed(loop, start) >= 0.6
    control.SetSetDelay(0)
    start = loop.time()
    await client.set_network_properties(net, {"bgscan": Variant("s", NM_BGSCAN)})
    assert _elapsed(loop, start) < 0.5
    sets = [{str(k): str(v) for k, v in s.items()} for s in control.GetPropertiesSets(net)]
    assert sets == [{"bgscan": ""}, {"nonsense": "x"}, {"bgscan": NM_BGSCAN}]
    assert len(wpa_supplicant_mock.mock_object(net).GetMethodCalls("Set")) == 3


def control_bgscan(mock, net):
    """The network's bgscan as read over dbus-python, "" if absent."""
    obj = mock.connection.get_object("fi.w1.wpa_supplicant1", net, introspect=False)
    props = obj.Get(NETWORK_IFACE, "Properties", dbus_interface="org.freedesktop.DBus.Properties")
    return str(props.get("bgscan", ""))


@pytest.mark.parametrize("text", ["plain", "Café ☕"])
async def test_hang_withholds_properties_calls_until_cleared(wpa_supplicant_mock, client, text):
    import asyncio

    control = wpa_supplicant_mock.control
    iface, net = await _network(control, client)
    control.SetHang(True)
    set_call = asyncio.ensure_future(client.set_network_properties(net, {"bgscan": Variant("s", "")}))
    get_call = asyncio.ensure_future(client.get(iface, INTERFACE_IFACE, "CurrentNetwork"))
    # Other methods still answer; the Properties calls wait without taking effect.
    assert await client.get_interface("wlan0") == iface
    await assert_eventually(lambda: control.GetFaults()["hung_calls"] == 2)
    assert not set_call.done() and not get_call.done()
    assert [{str(k): str(v) for k, v in s.items()} for s in control.GetPropertiesSets(net)] == []
    # The SSID set while stuck is a user's string: it goes through once the hang clears.
    ssid = asyncio.ensure_future(client.set_network_properties(net, {"ssid": Variant("s", text)}))
    await assert_eventually(lambda: control.GetFaults()["hung_calls"] == 3)
    control.SetHang(False)
    await asyncio.wait_for(set_call, 2)
    assert (await asyncio.wait_for(get_call, 2)).value == net
    await asyncio.wait_for(ssid, 2)
    props = await client.network_properties(net)
    assert props["bgscan"] == '""'
    assert props["ssid"] == (f'"{text}"' if text.isascii() else text.encode().hex())
    assert control.GetFaults()["hung_calls"] == 0


async def test_hung_set_still_takes_effect_after_the_caller_gave_up(wpa_supplicant_mock, system_bus):
    """A client that timed out and left: its Set is carried out when the hang clears."""
    import asyncio

    control = wpa_supplicant_mock.control
    iface = str(control.AddWifiInterface("wlan0"))
    net = str(control.AddNetworkWithBgscan(iface, "home", NM_BGSCAN))
    control.SetHang(True)
    gone = await MessageBus(bus_address=system_bus.address).connect()
    caller = await WpaClient.connect(gone)
    pending = asyncio.ensure_future(caller.set_network_properties(net, {"bgscan": Variant("s", "")}))
    await assert_eventually(lambda: control.GetFaults()["hung_calls"] == 1)
    gone.disconnect()
    with pytest.raises(Exception):
        await asyncio.wait_for(pending, 2)
    control.SetHang(False)
    assert control_bgscan(wpa_supplicant_mock, net) == '""'


async def test_fail_next_fails_client_calls_only(wpa_supplicant_mock, client):
    control = wpa_supplicant_mock.control
    iface, net = await _network(control, client)
    with pytest.raises(Exception) as info:
        control.SetFailNext("", 2)
    assert "error name" in str(info.value)
    control.SetFailNext("org.freedesktop.DBus.Error.AccessDenied", 3)
    # NetworkManager's calls are not counted.
    other = await client.add_network(iface, ssid='"other"')
    for attempt in (lambda: client.get_interface("wlan0"),
                    lambda: client.network_properties(net),
                    lambda: client.set_network_properties(net, {"bgscan": Variant("s", "")})):
        with pytest.raises(Exception) as info:
            await attempt()
        assert info.value.type == "org.freedesktop.DBus.Error.AccessDenied"
        assert "injected" in info.value.text
    assert control.GetFaults()["fail_left"] == 0
    # The failed Set did nothing and is not recorded as sent; the next calls work again.
    assert (await client.network_properties(net))["bgscan"] == f'"{NM_BGSCAN}"'
    assert list(control.GetPropertiesSets(net)) == []
    await client.set_network_properties(net, {"bgscan": Variant("s", "")})
    assert (await client.network_properties(net))["bgscan"] == '""'
    assert other.endswith("/Networks/1")
    control.SetFailNext("org.freedesktop.DBus.Error.NoReply", 5)
    control.SetFailNext("", 0)
    assert (control.GetFaults()["fail_error"], control.GetFaults()["fail_left"]) == ("", 0)
    assert await client.get_interface("wlan0") == iface


async def test_a_scan_request_hangs_and_fails_like_the_other_client_calls(wpa_supplicant_mock,
                                                                          client):
    """nm-scanguard asks for a scan when it releases on a weak signal: a stuck or failing
    wpa_supplicant withholds or refuses that call too."""
    import asyncio

    control = wpa_supplicant_mock.control
    iface = str(control.AddWifiInterface("wlan0"))
    active = [{"Type": Variant("s", "active")}]
    control.SetFailNext("fi.w1.wpa_supplicant1.Interface.ScanError", 1)
    with pytest.raises(Exception) as info:
        await client.call(iface, INTERFACE_IFACE, "Scan", "a{sv}", active)
    assert info.value.type == "fi.w1.wpa_supplicant1.Interface.ScanError"
    assert not client.signals_of("ScanDone", iface)  # refused: nothing scanned
    control.SetHang(True)
    scan = asyncio.ensure_future(client.call(iface, INTERFACE_IFACE, "Scan", "a{sv}", active))
    await assert_eventually(lambda: control.GetFaults()["hung_calls"] == 1)
    await asyncio.sleep(0.1)
    assert not scan.done() and not client.signals_of("ScanDone", iface)
    control.SetHang(False)
    await asyncio.wait_for(scan, 2)
    await assert_eventually(lambda: client.signals_of("ScanDone", iface))
    assert client.signals_of("ScanDone", iface)[0].body == [True]


async def test_faults_are_gone_after_a_restart(wpa_supplicant_mock, client):
    control = wpa_supplicant_mock.control
    control.SetHang(True)
    control.SetSetDelay(50)
    control.SetFailNext("org.freedesktop.DBus.Error.Failed", 1)
    wpa_supplicant_mock.restart()
    faults = {str(k): v for k, v in wpa_supplicant_mock.control.GetFaults().items()}
    assert faults == {"set_delay_ms": 0, "hang": False, "hung_calls": 0, "fail_error": "",
                      "fail_left": 0}
