"""The contract's scenarios: what wpa_supplicant 2.10 answers, written once for every backend.

Each is a coroutine on a WpaClient (tests/contract/wpaclient.py) whose interface ``lo`` exists
(``wpa.iface``), with signals recorded from before it was made.  The real ``/sbin/wpa_supplicant
-u`` (driver ``none``: no radio, so it cannot associate, its scans fail, SignalPoll fails) and
the D-Bus mock must pass them all (test_wpa_supplicant_contract.py); the model rung's
wpa_supplicant (tests/model/peers.py) runs them too (test_model_wpa_supplicant.py).  It
simulates what scanguardd uses: a scenario about anything else names why (``model_differs``)
and runs there as xfail(strict=True), so a model that gains the feature says so.

What NetworkManager does (CreateInterface, AddNetwork, SelectNetwork, RemoveNetwork,
RemoveInterface) goes through the client's methods of those names: D-Bus calls on the real one
and the mock, the model's own entry points on the model.  A scenario about those calls' D-Bus
errors makes the raw call.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Awaitable, Callable

import pytest

from nm_scanguard.dbuslib import Message, Variant
from nm_scanguard.peers.supplicant import SCAN_ERROR, NoScanRunning, Supplicant
from tests.conftest import assert_eventually
from tests.contract.wpaclient import (INTERFACE_IFACE, NETWORK_IFACE, ROOT_IFACE, ROOT_PATH,
                                      WpaClient, error_of)
from tests.wpa_supplicant_rules import NETWORK_FIELDS

NM_BGSCAN = "simple:30:-70:86400"  # what NetworkManager writes by default
SCAN_ENDS_WITHIN = 10.0  # seconds (the model's scan takes 7; driver "none" fails one at once)


# The Properties of a fresh network, as recorded from wpa_supplicant 2.10 for the simulators.
FRESH_NETWORK = {k: v for k, v in NETWORK_FIELDS if v is not None}


ScenarioFunction = Callable[[WpaClient], Awaitable[None]]


@dataclass(frozen=True)
class Scenario:
    run: ScenarioFunction
    model_differs: str  # "": the model must pass it; else why the model answers otherwise

    @property
    def name(self) -> str:
        return self.run.__name__


SCENARIOS: list[Scenario] = []


def scenario(model_differs: str = "") -> Callable[[ScenarioFunction], ScenarioFunction]:
    def register(run: ScenarioFunction) -> ScenarioFunction:
        SCENARIOS.append(Scenario(run, model_differs))
        return run
    return register


_NM_SIDE_ERRORS = ("the model has NetworkManager's calls (CreateInterface, RemoveNetwork) as "
                   "Python calls, without their D-Bus errors: scanguardd never makes them")
_NETWORK_FIELDS = ("the model's network has only ssid and bgscan in Properties, and no "
                   "Enabled: scanguardd reads and writes bgscan alone")


# --- the root object ---------------------------------------------------------------------

@scenario()
async def get_interface_known_and_unknown(wpa: WpaClient) -> None:
    assert re.fullmatch(r"/fi/w1/wpa_supplicant1/Interfaces/\d+", wpa.iface)
    assert await wpa.get_interface("lo") == wpa.iface

    err = await error_of(wpa.get_interface("nosuch0"))
    assert err.type == "fi.w1.wpa_supplicant1.InterfaceUnknown"
    assert err.text == "wpa_supplicant knows nothing about this interface."


@scenario(model_differs="the model's interfaces appear without InterfaceAdded or a State: "
                        "scanguardd follows neither, it asks GetInterface")
async def interface_added_is_announced(wpa: WpaClient) -> None:
    added = wpa.signals_of("InterfaceAdded", ROOT_PATH, ROOT_IFACE)
    assert [s.body[0] for s in added] == [wpa.iface]
    assert added[0].signature == "oa{sv}"
    assert added[0].body[1]["Ifname"].value == "lo"
    # Then the initial State, on both PropertiesChanged flavours.
    await assert_eventually(
        lambda: wpa.announced(wpa.iface, INTERFACE_IFACE, "State", "disconnected")
        == {"standard", "legacy"})


@scenario(model_differs=_NM_SIDE_ERRORS)
async def create_interface_errors(wpa: WpaClient) -> None:
    err = await error_of(wpa.create_interface("lo"))
    assert (err.type, err.text) == ("fi.w1.wpa_supplicant1.InterfaceExists",
                                    "wpa_supplicant already controls this interface.")
    err = await error_of(wpa.create_interface("nosuch0"))
    assert (err.type, err.text) == ("fi.w1.wpa_supplicant1.UnknownError",
                                    "wpa_supplicant couldn't grab this interface.")
    err = await error_of(wpa.call(ROOT_PATH, ROOT_IFACE, "CreateInterface", "a{sv}",
                                   [{"Driver": Variant("s", "none")}]))
    assert err.type == "fi.w1.wpa_supplicant1.InvalidArgs"


@scenario()
async def remove_interface_removes_networks_first(wpa: WpaClient) -> None:
    net = await wpa.add_network(wpa.iface, ssid="a")
    await wpa.remove_interface(wpa.iface)
    order = [(s.member, s.body[0]) for s in wpa.signals
             if s.member in ("NetworkRemoved", "InterfaceRemoved")]
    assert order == [("NetworkRemoved", net), ("InterfaceRemoved", wpa.iface)]

    err = await error_of(wpa.get_interface("lo"))
    assert err.type == "fi.w1.wpa_supplicant1.InterfaceUnknown"
    again = await wpa.create_interface("lo")
    assert again != wpa.iface, "interface paths are not reused"


# --- the interface object --------------------------------------------------------------

@scenario()
async def interface_properties_scanguardd_reads(wpa: WpaClient) -> None:
    current = await wpa.get(wpa.iface, INTERFACE_IFACE, "CurrentNetwork")
    assert (current.signature, current.value) == ("o", "/")
    scanning = await wpa.get(wpa.iface, INTERFACE_IFACE, "Scanning")
    assert (scanning.signature, scanning.value) == ("b", False)


@scenario(model_differs="the model's interface has only the properties scanguardd reads "
                        "(CurrentNetwork, Scanning) and no GetAll")
async def interface_properties_when_not_connected(wpa: WpaClient) -> None:
    ifname = await wpa.get(wpa.iface, INTERFACE_IFACE, "Ifname")
    assert (ifname.signature, ifname.value) == ("s", "lo")
    state = await wpa.get(wpa.iface, INTERFACE_IFACE, "State")
    assert state.signature == "s" and state.value in ("disconnected", "inactive")

    everything = (await wpa.call(wpa.iface, "org.freedesktop.DBus.Properties", "GetAll", "s",
                                 [INTERFACE_IFACE]))[0]
    assert {"CurrentNetwork", "State", "Scanning", "Ifname", "Networks"} <= set(everything)


@scenario()
async def signal_poll_fails_when_not_associated(wpa: WpaClient) -> None:
    err = await error_of(wpa.call(wpa.iface, INTERFACE_IFACE, "SignalPoll"))
    assert (err.type, err.text) == ("org.freedesktop.DBus.Error.Failed", "Failed to read signal")


async def _two_scans(wpa: WpaClient) -> list[Message]:
    """A scan asked for, then the one nm-scanguard asks for when it releases on a weak signal
    (Supplicant.scan): their ScanDone signals."""
    def scans_done() -> list[Message]:
        return wpa.signals_of("ScanDone", wpa.iface, INTERFACE_IFACE)

    await wpa.call(wpa.iface, INTERFACE_IFACE, "Scan", "a{sv}", [{"Type": Variant("s", "passive")}])
    await assert_eventually(scans_done, timeout=SCAN_ENDS_WITHIN)
    await Supplicant(wpa.bus).scan(wpa.iface)
    await assert_eventually(lambda: len(scans_done()) == 2, timeout=SCAN_ENDS_WITHIN)
    return scans_done()


@scenario()
async def scan_is_followed_by_scan_done(wpa: WpaClient) -> None:
    assert [s.signature for s in await _two_scans(wpa)] == ["b", "b"]

    err = await error_of(wpa.call(wpa.iface, INTERFACE_IFACE, "Scan", "a{sv}",
                                   [{"Type": Variant("s", "bogus")}]))
    assert (err.type, err.text) == ("fi.w1.wpa_supplicant1.InvalidArgs",
                                    "Did not receive correct message arguments.")


@scenario(model_differs="the model simulates a radio: its scans succeed")
async def scans_fail_without_a_radio(wpa: WpaClient) -> None:
    """Driver "none" cannot scan: a scan is accepted and reported as failed."""
    assert [s.body for s in await _two_scans(wpa)] == [[False], [False]]


@scenario()
async def abort_scan_without_a_scan_running(wpa: WpaClient) -> None:
    """AbortScan with nothing to abort (on driver "none" a scan never runs): the ScanError that
    Supplicant.abort_scan turns into NoScanRunning, a race and not a failure.  The answer with a
    scan running needs a radio: the lab checks it against the same binary (test_lab_abort)."""
    err = await error_of(wpa.call(wpa.iface, INTERFACE_IFACE, "AbortScan"))
    assert (err.type, err.text) == ("fi.w1.wpa_supplicant1.Interface.ScanError",
                                    "Abort failed or no scan in progress")
    with pytest.raises(NoScanRunning) as info:
        await Supplicant(wpa.bus).abort_scan(wpa.iface)
    assert info.value.bus_error == SCAN_ERROR
    assert await Supplicant(wpa.bus).scanning(wpa.iface) is False
    # Once a scan has ended, there is nothing to abort either.
    await wpa.call(wpa.iface, INTERFACE_IFACE, "Scan", "a{sv}", [{"Type": Variant("s", "passive")}])
    await assert_eventually(lambda: wpa.signals_of("ScanDone", wpa.iface, INTERFACE_IFACE),
                            timeout=SCAN_ENDS_WITHIN)
    err = await error_of(wpa.call(wpa.iface, INTERFACE_IFACE, "AbortScan"))
    assert err.type == SCAN_ERROR


@scenario()
async def network_paths_take_highest_id_plus_one(wpa: WpaClient) -> None:
    first = await wpa.add_network(wpa.iface, ssid="a")
    second = await wpa.add_network(wpa.iface, ssid="b")
    assert (first, second) == (f"{wpa.iface}/Networks/0", f"{wpa.iface}/Networks/1")
    await wpa.remove_network(wpa.iface, first)
    assert await wpa.add_network(wpa.iface, ssid="c") == f"{wpa.iface}/Networks/2"


@scenario(model_differs=_NM_SIDE_ERRORS)
async def remove_network_errors(wpa: WpaClient) -> None:
    err = await error_of(wpa.call(wpa.iface, INTERFACE_IFACE, "RemoveNetwork", "o", ["/bogus"]))
    assert (err.type, err.text) == ("fi.w1.wpa_supplicant1.InvalidArgs",
                                    "Did not receive correct message arguments.")
    err = await error_of(wpa.call(wpa.iface, INTERFACE_IFACE, "RemoveNetwork", "o",
                                   [f"{wpa.iface}/Networks/77"]))
    assert (err.type, err.text) == ("fi.w1.wpa_supplicant1.NetworkUnknown",
                                    "There is no such a network in this interface.")


@scenario(model_differs="in the model selecting a network is associating with it: it announces "
                        "CurrentNetwork, on the standard PropertiesChanged only (the one "
                        "scanguardd follows), and no NetworkSelected or Enabled")
async def select_then_remove_current_network(wpa: WpaClient) -> None:
    net = await wpa.add_network(wpa.iface, ssid="myssid", psk="secretpass", bgscan=NM_BGSCAN)
    await wpa.select_network(wpa.iface, net)

    assert [s.body for s in wpa.signals_of("NetworkSelected", wpa.iface)] == [[net]]
    await assert_eventually(
        lambda: wpa.announced(net, NETWORK_IFACE, "Enabled", True) == {"standard", "legacy"})
    # Selecting does not announce CurrentNetwork (only association would).
    assert not any("CurrentNetwork" in values
                   for _, values in wpa.property_changes(wpa.iface, INTERFACE_IFACE))

    await wpa.remove_network(wpa.iface, net)
    await assert_eventually(
        lambda: wpa.announced(wpa.iface, INTERFACE_IFACE, "CurrentNetwork", "/")
        == {"standard", "legacy"})


@scenario()
async def remove_the_current_network(wpa: WpaClient) -> None:
    net = await wpa.add_network(wpa.iface, ssid="myssid", psk="secretpass", bgscan=NM_BGSCAN)
    await wpa.select_network(wpa.iface, net)
    assert (await wpa.get(wpa.iface, INTERFACE_IFACE, "CurrentNetwork")).value == net

    await wpa.remove_network(wpa.iface, net)
    assert [s.body for s in wpa.signals_of("NetworkRemoved", wpa.iface)] == [[net]]
    await assert_eventually(
        lambda: "standard" in wpa.announced(wpa.iface, INTERFACE_IFACE, "CurrentNetwork", "/"))
    assert (await wpa.get(wpa.iface, INTERFACE_IFACE, "CurrentNetwork")).value == "/"


# --- network objects: Properties -------------------------------------------------------

@scenario()
async def bgscan_reads_back_quoted(wpa: WpaClient) -> None:
    net = await wpa.add_network(wpa.iface, ssid="myssid", psk="secretpass", bgscan=NM_BGSCAN)
    assert re.fullmatch(re.escape(wpa.iface) + r"/Networks/\d+", net)

    props = await wpa.network_properties(net)
    assert props["bgscan"] == '"simple:30:-70:86400"'
    assert "psk" not in props


@scenario(model_differs=_NETWORK_FIELDS)
async def add_network_reads_back_every_field(wpa: WpaClient) -> None:
    net = await wpa.add_network(wpa.iface, ssid="myssid", psk="secretpass", bgscan=NM_BGSCAN)
    props = await wpa.network_properties(net)
    assert props == {**FRESH_NETWORK, "ssid": '"myssid"', "bgscan": '"simple:30:-70:86400"'}
    enabled = await wpa.get(net, NETWORK_IFACE, "Enabled")
    assert (enabled.signature, enabled.value) == ("b", False)

    # NetworkAdded is sent while the network is a zeroed struct (before defaults and
    # arguments): only integer fields, all "0", and Enabled true.  Not to be trusted.
    [added] = wpa.signals_of("NetworkAdded", wpa.iface, INTERFACE_IFACE)
    assert added.signature == "oa{sv}" and added.body[0] == net
    assert set(added.body[1]) == {"Properties", "Enabled"}
    zeroed = {k: "0" for k, v in FRESH_NETWORK.items() if re.fullmatch(r"-?\d+", v)}
    assert {k: v.value for k, v in added.body[1]["Properties"].value.items()} == zeroed
    assert added.body[1]["Enabled"].value is True

    locked = await wpa.add_network(wpa.iface, ssid="locked", bssid="02:00:00:00:01:00")
    assert await wpa.network_properties(locked) == {**FRESH_NETWORK, "ssid": '"locked"',
                                                    "bssid": "02:00:00:00:01:00"}


@scenario()
async def bgscan_only_set_and_restore(wpa: WpaClient) -> None:
    """What the daemon does: engage with {"bgscan": ""}, release with the remembered value."""
    net = await wpa.add_network(wpa.iface, ssid="myssid", psk="secretpass", bgscan=NM_BGSCAN)
    original = await wpa.network_properties(net)
    assert original["bgscan"] == '"simple:30:-70:86400"'
    before = len(wpa.signals)

    await wpa.set_network_properties(net, {"bgscan": Variant("s", "")})
    assert await wpa.network_properties(net) == {**original, "bgscan": '""'}

    await wpa.set_network_properties(net, {"bgscan": Variant("s", NM_BGSCAN)})
    assert await wpa.network_properties(net) == original

    # Setting Properties announces nothing.  Both flush changes after 5 ms, so give them 50.
    await asyncio.sleep(0.05)
    assert [(s.path, s.interface, s.member) for s in wpa.signals[before:]
            if s.path == net] == []


@scenario()
async def writing_back_the_quoted_value_quotes_it_again(wpa: WpaClient) -> None:
    net = await wpa.add_network(wpa.iface, ssid="myssid", bgscan=NM_BGSCAN)
    read = (await wpa.network_properties(net))["bgscan"]
    await wpa.set_network_properties(net, {"bgscan": Variant("s", read)})
    assert (await wpa.network_properties(net))["bgscan"] == '""simple:30:-70:86400""'


@scenario()
async def network_without_bgscan(wpa: WpaClient) -> None:
    net = await wpa.add_network(wpa.iface, ssid="locked", bssid="02:00:00:00:01:00")
    assert "bgscan" not in await wpa.network_properties(net)

    # Once set, even to "", the key stays: there is no way back to "absent".
    await wpa.set_network_properties(net, {"bgscan": Variant("s", "")})
    assert (await wpa.network_properties(net))["bgscan"] == '""'


@scenario(model_differs="the model's Set takes bgscan alone (any other key is a violation "
                        "scanguardd must not commit) and does not check value types")
async def set_properties_value_types_and_errors(wpa: WpaClient) -> None:
    net = await wpa.add_network(wpa.iface, ssid="myssid", bgscan=NM_BGSCAN)

    await wpa.set_network_properties(net, {"priority": Variant("i", 5)})
    assert (await wpa.network_properties(net))["priority"] == "5"
    await wpa.set_network_properties(net, {"priority": Variant("u", 7)})
    assert (await wpa.network_properties(net))["priority"] == "7"
    await wpa.set_network_properties(net, {"key_mgmt": Variant("s", "WPA-PSK")})  # not quoted
    assert (await wpa.network_properties(net))["key_mgmt"] == "WPA-PSK"
    await wpa.set_network_properties(net, {"ssid": Variant("ay", b"a\x01b")})
    assert (await wpa.network_properties(net))["ssid"] == "610162"
    await wpa.set_network_properties(net, {})

    for bad in ({"priority": Variant("s", "9")},     # integer fields reject (quoted) strings
                {"bgscan": Variant("b", True)},       # only s, i, u, ay are accepted
                {"nosuchkey": Variant("s", "x")},
                {"psk": Variant("s", "short")}):
        err = await error_of(wpa.set_network_properties(net, bad))
        assert (err.type, err.text) == ("org.freedesktop.DBus.Error.InvalidArgs",
                                        "invalid message format"), bad

    # Not atomic: keys before the bad one are applied.
    before = await wpa.network_properties(net)
    await error_of(wpa.set_network_properties(
        net, {"bgscan": Variant("s", "simple:1:-1:1"), "nosuchkey": Variant("s", "x")}))
    assert await wpa.network_properties(net) == {**before, "bgscan": '"simple:1:-1:1"'}


@scenario()
async def calls_on_a_removed_network_fail(wpa: WpaClient) -> None:
    net = await wpa.add_network(wpa.iface, ssid="myssid")
    err = await error_of(wpa.get(net, NETWORK_IFACE, "Nope"))
    assert (err.type, err.text) == ("org.freedesktop.DBus.Error.InvalidArgs", "No such property")

    # A network removed between reading and writing (NM re-activated): UnknownMethod.
    await wpa.remove_network(wpa.iface, net)
    err = await error_of(wpa.set_network_properties(net, {"bgscan": Variant("s", "")}))
    assert err.type == "org.freedesktop.DBus.Error.UnknownMethod"
    err = await error_of(wpa.get(net, NETWORK_IFACE, "Properties"))
    assert err.type == "org.freedesktop.DBus.Error.UnknownMethod"


@scenario(model_differs="the model answers only the property calls scanguardd makes: no "
                        "Enabled, no GetAll, and one error for any other")
async def property_errors(wpa: WpaClient) -> None:
    net = await wpa.add_network(wpa.iface, ssid="myssid")
    err = await error_of(wpa.set(wpa.iface, INTERFACE_IFACE, "State", Variant("s", "completed")))
    assert (err.type, err.text) == ("org.freedesktop.DBus.Error.InvalidArgs",
                                    "Property is read-only")
    err = await error_of(wpa.set(net, NETWORK_IFACE, "Enabled", Variant("s", "yes")))
    assert (err.type, err.text) == ("org.freedesktop.DBus.Error.Failed", "wrong property type")
    assert await wpa.call(net, "org.freedesktop.DBus.Properties", "GetAll", "s",
                          ["fi.w1.wpa_supplicant1.Nope"]) == [{}]

    everything = (await wpa.call(net, "org.freedesktop.DBus.Properties", "GetAll", "s",
                                 [NETWORK_IFACE]))[0]
    assert set(everything) == {"Properties", "Enabled"}


@scenario(model_differs=_NETWORK_FIELDS)
async def enabled_changes_are_announced(wpa: WpaClient) -> None:
    net = await wpa.add_network(wpa.iface, ssid="myssid")
    await wpa.set(net, NETWORK_IFACE, "Enabled", Variant("b", True))
    assert (await wpa.get(net, NETWORK_IFACE, "Enabled")).value is True
    assert (await wpa.network_properties(net))["disabled"] == "0"
    await assert_eventually(
        lambda: wpa.announced(net, NETWORK_IFACE, "Enabled", True) == {"standard", "legacy"})


# The scenarios about roaming with targeted scans (issue 35) register here too, once the
# helpers above exist.
from tests.contract import wpa_roaming_scenarios  # noqa: E402,F401
