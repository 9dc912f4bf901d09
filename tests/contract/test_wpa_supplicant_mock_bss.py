"""The mock's BSS objects and what uses them (Roam, targeted scans), which issue 35 relies on.

Driver "none" never finds a BSS, so none of this has a real counterpart to compare with: it is
tested against the template's documentation (tests/mocks/wpa_supplicant_bss.py).  Roam's and
Scan's errors are in the contract (tests/contract/wpa_roaming_scenarios.py).
"""

from __future__ import annotations

import dbus

from nm_scanguard.dbuslib import Variant
from tests.conftest import assert_eventually
from tests.contract.wpaclient import INTERFACE_IFACE, error_detail, error_of

BSS_IFACE = "fi.w1.wpa_supplicant1.BSS"
SSID = "Café ☕"


def _add_bss(control, iface, bssid, frequency=5180, signal=-60, ssid=SSID, security="wpa2-psk"):
    return str(control.AddBSS(dbus.ObjectPath(iface), dbus.ByteArray(ssid.encode()), bssid,
                              dbus.UInt16(frequency), dbus.Int16(signal), security))


async def test_add_and_remove_bss(wpa_supplicant_mock, client):
    control = wpa_supplicant_mock.control
    iface = str(control.AddWifiInterface("wlan0"))
    first = _add_bss(control, iface, "02:00:00:00:01:00")
    second = _add_bss(control, iface, "02:00:00:00:02:00", frequency=2412, signal=-71)
    assert (first, second) == (f"{iface}/BSSs/0", f"{iface}/BSSs/1")

    bsss = await client.get(iface, INTERFACE_IFACE, "BSSs")
    assert (bsss.signature, bsss.value) == ("ao", [first, second])
    await assert_eventually(lambda: client.announced(iface, INTERFACE_IFACE, "BSSs",
                                                     [first, second]) == {"standard", "legacy"})
    [added, _] = client.signals_of("BSSAdded", iface, INTERFACE_IFACE)
    assert added.signature == "oa{sv}" and added.body[0] == first
    announced = {k: (v.signature, v.value) for k, v in added.body[1].items()}
    assert announced["SSID"] == ("ay", SSID.encode())
    assert announced["BSSID"] == ("ay", bytes.fromhex("020000000100"))
    assert announced["Frequency"] == ("q", 5180) and announced["Signal"] == ("n", -60)
    assert announced["Privacy"] == ("b", True)
    assert announced["RSN"][1]["KeyMgmt"].value == ["wpa-psk"]

    for name, expected in (("SSID", ("ay", SSID.encode())), ("Frequency", ("q", 2412)),
                           ("Signal", ("n", -71)), ("Age", ("u", 0)),
                           ("Mode", ("s", "infrastructure"))):
        value = await client.get(second, BSS_IFACE, name)
        assert (value.signature, value.value) == expected, name
    err = await error_of(client.set(second, BSS_IFACE, "Signal", Variant("n", -30)))
    assert err.text == "Property is read-only"

    control.RemoveBSS(dbus.ObjectPath(first))
    await assert_eventually(lambda: [s.body for s in client.signals_of("BSSRemoved", iface)]
                            == [[first]])
    assert (await client.get(iface, INTERFACE_IFACE, "BSSs")).value == [second]
    assert _add_bss(control, iface, "02:00:00:00:01:00") == f"{iface}/BSSs/2", "never reused"


async def test_roam_moves_to_a_known_bss_of_the_current_network(wpa_supplicant_mock, client):
    control = wpa_supplicant_mock.control
    iface = str(control.AddWifiInterface("wlan0"))
    net = await client.add_network(iface, ssid=SSID, psk="secretpass")
    control.SetCurrentNetwork(iface, net)
    target = _add_bss(control, iface, "02:00:00:00:01:00")
    _add_bss(control, iface, "02:00:00:00:09:00", ssid="elsewhere")

    await client.call(iface, INTERFACE_IFACE, "Roam", "s", ["02:00:00:00:01:00"])
    assert (await client.get(iface, INTERFACE_IFACE, "CurrentBSS")).value == target
    await assert_eventually(lambda: client.announced(iface, INTERFACE_IFACE, "CurrentBSS", target))

    # A BSS of another SSID is not the current network's: not found, as with none at all.
    err = await error_of(client.call(iface, INTERFACE_IFACE, "Roam", "s", ["02:00:00:00:09:00"]))
    assert error_detail(err) == "Target BSS not found"

    control.RemoveBSS(dbus.ObjectPath(target))
    await assert_eventually(lambda: client.announced(iface, INTERFACE_IFACE, "CurrentBSS", "/"))


async def test_targeted_scan_on_a_radio_is_recorded(wpa_supplicant_mock, client):
    control = wpa_supplicant_mock.control
    iface = str(control.AddWifiInterface("wlan0"))
    args = {"Type": Variant("s", "active"), "Channels": Variant("a(uu)", [[5180, 80]]),
            "AllowRoam": Variant("b", False)}
    await client.call(iface, INTERFACE_IFACE, "Scan", "a{sv}", [args])
    await assert_eventually(lambda: [s.body for s in client.signals_of("ScanDone", iface)]
                            == [[True]])
    [(_, [recorded])] = wpa_supplicant_mock.mock_object(iface).GetMethodCalls("Scan")
    assert [tuple(c) for c in recorded["Channels"]] == [(5180, 80)]
    assert bool(recorded["AllowRoam"]) is False


async def test_fail_next_counts_roam(wpa_supplicant_mock, client):
    control = wpa_supplicant_mock.control
    iface = str(control.AddWifiInterface("wlan0"))
    control.SetFailNext("org.freedesktop.DBus.Error.NoReply", 1)
    err = await error_of(client.call(iface, INTERFACE_IFACE, "Roam", "s", ["02:00:00:00:01:00"]))
    assert err.type == "org.freedesktop.DBus.Error.NoReply"
    err = await error_of(client.call(iface, INTERFACE_IFACE, "Roam", "s", ["02:00:00:00:01:00"]))
    assert err.type == "fi.w1.wpa_supplicant1.NotConnected"
