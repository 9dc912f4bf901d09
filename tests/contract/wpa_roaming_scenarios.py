"""The contract's scenarios about roaming with targeted scans: what wpa_supplicant 2.10 answers.

Issue 35 will have scanguardd learn the guarded network's other BSSes (``BSSs``, ``BSSAdded``,
``BSSRemoved``), scan only their channels (``Scan`` with ``Channels`` and ``AllowRoam``) and
possibly ask wpa_supplicant to move (``Roam``).  These scenarios pin that API as the real binary
answers it, so that the mock (tests/mocks/wpa_supplicant.py) cannot drift before it is used.
They register in wpa_scenarios.SCENARIOS (which imports this module) and run wherever those do.

Driver ``none`` has no radio: every scan fails, so no BSS object can ever exist there.  What a
BSS object holds, and Roam to a BSS that exists, are therefore only in the mock (modelled on
wpa_supplicant/dbus/dbus_new_handlers.c of 2.10, and said so there).
"""

from __future__ import annotations

from nm_scanguard.dbuslib import Message, Variant
from tests.conftest import assert_eventually
from tests.contract.wpa_scenarios import SCAN_ENDS_WITHIN, scenario
from tests.contract.wpaclient import INTERFACE_IFACE, WpaClient, error_detail, error_of

WPA_INVALID_ARGS = "fi.w1.wpa_supplicant1.InvalidArgs"
BAD_ARGUMENTS = "Did not receive correct message arguments."  # every InvalidArgs' first text

CHANNELS = [[2412, 20], [5180, 80]]  # (centre frequency in MHz, width in MHz)


async def _scan(wpa: WpaClient, args: dict[str, Variant]) -> None:
    await wpa.call(wpa.iface, INTERFACE_IFACE, "Scan", "a{sv}", [args])


async def _targeted_scans(wpa: WpaClient) -> list[Message]:
    """The two scans issue 35 will ask for on the guarded network's channels, one after the
    other: passive (Channels alone), then active for the network's SSID, without roaming."""
    def scans_done() -> list[Message]:
        return wpa.signals_of("ScanDone", wpa.iface, INTERFACE_IFACE)

    await _scan(wpa, {"Type": Variant("s", "passive"), "Channels": Variant("a(uu)", CHANNELS)})
    await assert_eventually(scans_done, timeout=SCAN_ENDS_WITHIN)
    await _scan(wpa, {"Type": Variant("s", "active"), "Channels": Variant("a(uu)", CHANNELS),
                      "AllowRoam": Variant("b", False),
                      "SSIDs": Variant("aay", ["Café ☕".encode()])})
    await assert_eventually(lambda: len(scans_done()) == 2, timeout=SCAN_ENDS_WITHIN)
    return scans_done()


@scenario(model_differs="the model has no Introspect")
async def interface_introspection_for_roaming(wpa: WpaClient) -> None:
    """The signatures issue 35 relies on, as the binary introspects them (argument names left
    out: Roam's is "addr")."""
    api = await wpa.introspect(wpa.iface, INTERFACE_IFACE)
    assert {m: api.methods.get(m) for m in ("Scan", "AbortScan", "Roam")} == {
        "Scan": (("in", "a{sv}"),), "AbortScan": (), "Roam": (("in", "s"),)}
    assert {s: api.signals.get(s) for s in ("ScanDone", "BSSAdded", "BSSRemoved")} == {
        "ScanDone": ("b",), "BSSAdded": ("o", "a{sv}"), "BSSRemoved": ("o",)}
    assert {p: api.properties.get(p) for p in (
        "BSSs", "CurrentBSS", "CurrentNetwork", "State", "Scanning", "BSSExpireAge",
        "BSSExpireCount", "RoamTime", "RoamComplete")} == {
        "BSSs": ("ao", "read"), "CurrentBSS": ("o", "read"), "CurrentNetwork": ("o", "read"),
        "State": ("s", "read"), "Scanning": ("b", "read"), "BSSExpireAge": ("u", "readwrite"),
        "BSSExpireCount": ("u", "readwrite"), "RoamTime": ("u", "read"),
        "RoamComplete": ("b", "read")}


@scenario()
async def targeted_scans_are_accepted(wpa: WpaClient) -> None:
    assert [s.signature for s in await _targeted_scans(wpa)] == ["b", "b"]


@scenario(model_differs="the model simulates a radio: its scans succeed")
async def targeted_scans_fail_without_a_radio(wpa: WpaClient) -> None:
    """Driver "none": accepted, then ScanDone(false) at once, as for an untargeted scan."""
    assert [s.body for s in await _targeted_scans(wpa)] == [[False], [False]]


_PASSIVE = {"Type": Variant("s", "passive")}
# Scan's bad options, each with the second string of the InvalidArgs it gets.  Checked in the
# order given; an unknown key is named; AllowRoam's message says "Type".
SCAN_OPTION_ERRORS: tuple[tuple[dict[str, Variant], str | None], ...] = (
    ({**_PASSIVE, "Channels": Variant("au", [2412])},
     "Wrong Channels value type. Array of structs required"),
    ({**_PASSIVE, "Channels": Variant("a(uu)", [])},  # empty: refused as well
     "Wrong Channels value type. Array of structs required"),
    ({**_PASSIVE, "Channels": Variant("a(ii)", [[2412, 20]])},
     "Wrong Channel struct. Two UINT32s required"),
    ({**_PASSIVE, "AllowRoam": Variant("s", "no")}, "Wrong Type value type. Boolean required"),
    ({**_PASSIVE, "Roam": Variant("b", False)}, "Roam"),
    ({"Type": Variant("s", "targeted")}, "Wrong scan type"),
    ({"Type": Variant("u", 1)}, "Wrong Type value type. String required"),
    ({"AllowRoam": Variant("b", False)}, "AllowRoam"),  # no Type: the last key read
    ({}, None),
    ({**_PASSIVE, "SSIDs": Variant("aay", [b"x"])},
     "You can specify only Channels in passive scan"),
    ({"Type": Variant("s", "active"), "SSIDs": Variant("as", ["x"])},
     "Wrong SSIDs value type. Array of arrays of bytes required"),
    ({"Type": Variant("s", "active"), "SSIDs": Variant("aay", [b"x" * 33])},
     "Invalid SSID: too long"))
# Accepted though odd: a struct of more than two uint32s, and channel 0.
SCAN_OPTIONS_LENIENT = ({**_PASSIVE, "Channels": Variant("a(uuu)", [[2412, 20, 7]])},
                        {**_PASSIVE, "Channels": Variant("a(uu)", [[0, 0]])})


@scenario()
async def scan_option_errors(wpa: WpaClient) -> None:
    """Each bad option: InvalidArgs with the fixed text and a second string naming the fault."""
    for args, detail in SCAN_OPTION_ERRORS:
        err = await error_of(_scan(wpa, args))
        assert (err.type, err.text, error_detail(err)) == (WPA_INVALID_ARGS, BAD_ARGUMENTS,
                                                           detail), args
    assert wpa.signals_of("ScanDone", wpa.iface, INTERFACE_IFACE) == []

    lenient, other = SCAN_OPTIONS_LENIENT
    await _scan(wpa, lenient)
    await assert_eventually(lambda: wpa.signals_of("ScanDone", wpa.iface, INTERFACE_IFACE),
                            timeout=SCAN_ENDS_WITHIN)
    await _scan(wpa, other)
    await assert_eventually(lambda: len(wpa.signals_of("ScanDone", wpa.iface,
                                                       INTERFACE_IFACE)) == 2,
                            timeout=SCAN_ENDS_WITHIN)


async def _roam(wpa: WpaClient, address: str) -> None:
    await wpa.call(wpa.iface, INTERFACE_IFACE, "Roam", "s", [address])


_BAD_ADDRESS = (WPA_INVALID_ARGS, BAD_ARGUMENTS, "Invalid hardware address format")
_NOT_CONNECTED = ("fi.w1.wpa_supplicant1.NotConnected", "This interface is not connected", None)
# Roam(address) with no network selected: (error name, text, second string).
ROAM_WHILE_NOT_CONNECTED = (
    ("nonsense", _BAD_ADDRESS), ("02-00-00-00-01-00", _BAD_ADDRESS),
    ("2:0:0:0:1:0", _BAD_ADDRESS), (" 02:00:00:00:01:00", _BAD_ADDRESS),
    ("02:00:00:00:01:00", _NOT_CONNECTED), ("0A:BB:CC:DD:EE:FF", _NOT_CONNECTED),
    ("02:00:00:00:01:00zz", _NOT_CONNECTED))  # trailing text ignored


@scenario()
async def roam_errors(wpa: WpaClient) -> None:
    """The address is checked first, then that a network is selected (CurrentNetwork, not
    State: "not connected" means none selected), then that wpa_supplicant knows a BSS of that
    address with the selected network's SSID."""
    for address, answer in ROAM_WHILE_NOT_CONNECTED:
        err = await error_of(_roam(wpa, address))
        assert (err.type, err.text, error_detail(err)) == answer, address

    err = await error_of(wpa.call(wpa.iface, INTERFACE_IFACE, "Roam", "o", ["/x"]))
    assert (err.type, err.text) == ("org.freedesktop.DBus.Error.InvalidArgs", "")

    net = await wpa.add_network(wpa.iface, ssid="Café ☕", psk="secretpass")
    await wpa.select_network(wpa.iface, net)
    err = await error_of(_roam(wpa, "02:00:00:00:01:00"))
    assert (err.type, err.text, error_detail(err)) == (WPA_INVALID_ARGS, BAD_ARGUMENTS,
                                                       "Target BSS not found")
    err = await error_of(_roam(wpa, "nonsense"))
    assert (err.type, err.text, error_detail(err)) == _BAD_ADDRESS


@scenario()
async def no_bss_without_a_radio(wpa: WpaClient) -> None:
    """Nothing scanned: no BSS.  Driver "none" never finds one, so BSS objects are mock-only."""
    async def value(name: str) -> tuple[str, object]:
        v = await wpa.get(wpa.iface, INTERFACE_IFACE, name)
        return v.signature, v.value

    assert await value("BSSs") == ("ao", [])
    assert await value("CurrentBSS") == ("o", "/")
    assert await value("BSSExpireAge") == ("u", 180)  # seconds unseen before a BSS is dropped
    assert await value("BSSExpireCount") == ("u", 2)  # or scans missing it
    assert await value("RoamComplete") == ("b", False)
    assert await value("RoamTime") == ("u", 0)
    err = await error_of(wpa.set(wpa.iface, INTERFACE_IFACE, "BSSExpireAge", Variant("u", 5)))
    assert (err.type, err.text) == ("org.freedesktop.DBus.Error.Failed",
                                    "BSSExpireAge must be >= 10")

    await _targeted_scans(wpa)
    assert await value("BSSs") == ("ao", [])
    assert wpa.signals_of("BSSAdded") == [] and wpa.signals_of("BSSRemoved") == []
