"""Contract: our wpa_supplicant mock answers like the real wpa_supplicant 2.10 binary.

Every test runs twice, against ``/sbin/wpa_supplicant -u`` and against tests/mocks/
wpa_supplicant.py, each on its own private system bus, through the same client calls, and
asserts the same results.  The interface is ``lo`` with driver ``none`` (CreateInterface), so
the real one has no radio: it cannot associate, its scans fail, SignalPoll always fails.
Associated behaviour (State "completed", a working SignalPoll) is therefore only in the mock,
modelled on wpa_supplicant/dbus/dbus_new_handlers.c, and documented in the template.

When a test fails, the real wpa_supplicant's debug log (-dd) or the mock's call log is printed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from nm_scanguard.dbuslib import BusType, MessageBus, Variant
from nm_scanguard.peers.supplicant import SCAN_ERROR, NoScanRunning, Supplicant
from tests.conftest import (DEFAULT_DENY_POLICY, MOCK_TEMPLATE, MockSupplicant, assert_eventually,
                            call_failed, start_private_bus, stop_process)
from tests.contract.wpaclient import (INTERFACE_IFACE, NETWORK_IFACE, ROOT_IFACE, ROOT_PATH,
                                      WpaClient, error_of)

WPA_SUPPLICANT = "/sbin/wpa_supplicant"
NM_BGSCAN = "simple:30:-70:86400"  # what NetworkManager writes by default


def _template_defaults() -> dict[str, str]:
    """The Properties of a fresh network, as recorded from wpa_supplicant 2.10 in the mock."""
    from dbusmock.mockobject import load_module
    fields = load_module(str(MOCK_TEMPLATE)).NETWORK_FIELDS
    return {k: v for k, v in fields if v is not None}


FRESH_NETWORK = _template_defaults()


def expected_network(**values: str) -> dict[str, str]:
    return {**FRESH_NETWORK, **values}


async def _wait_for_name(client: WpaClient) -> None:
    await assert_eventually(client.has_owner, timeout=10, message="fi.w1.wpa_supplicant1 on the bus")


@pytest.fixture(params=["real", "mock"])
async def wpa(request, system_bus, tmp_path):
    """A WpaClient on the real or the mock wpa_supplicant, with ``lo`` (driver none) created.

    ``wpa.kind`` is "real" or "mock"; ``wpa.iface`` the interface path.  Signals are recorded
    from before CreateInterface.
    """
    kind = request.param
    process = mock = None
    log = tmp_path / f"wpa_supplicant-{kind}.log"
    if kind == "real":
        if not os.access(WPA_SUPPLICANT, os.X_OK):
            pytest.fail(f"{WPA_SUPPLICANT} not installed: run `make test` (it installs wpasupplicant)")
        if os.geteuid() != 0:
            pytest.fail("the contract tests need root: the real wpa_supplicant must control an interface")
        process = subprocess.Popen([WPA_SUPPLICANT, "-u", "-dd", "-t", "-f", str(log)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    else:
        mock = MockSupplicant(system_bus.address, log)
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    try:
        client = await WpaClient.connect(bus)
        client.kind = kind
        await _wait_for_name(client)
        client.iface = await client.create_interface("lo", "none")
        yield client
    finally:
        bus.disconnect()
        if process:
            stop_process(process)
        if mock:
            mock.close()
        if call_failed(request) and log.exists():
            print(f"--- {kind} wpa_supplicant log ({log}) ---\n{log.read_text(errors='replace')}")


# --- the root object ---------------------------------------------------------------------

async def test_get_interface_known_and_unknown(wpa):
    assert re.fullmatch(r"/fi/w1/wpa_supplicant1/Interfaces/\d+", wpa.iface)
    assert await wpa.get_interface("lo") == wpa.iface

    err = await error_of(wpa.get_interface("nosuch0"))
    assert err.type == "fi.w1.wpa_supplicant1.InterfaceUnknown"
    assert err.text == "wpa_supplicant knows nothing about this interface."


async def test_interface_added_is_announced(wpa):
    added = wpa.signals_of("InterfaceAdded", ROOT_PATH, ROOT_IFACE)
    assert [s.body[0] for s in added] == [wpa.iface]
    assert added[0].signature == "oa{sv}"
    assert added[0].body[1]["Ifname"].value == "lo"
    # Then the initial State, on both PropertiesChanged flavours.
    await assert_eventually(
        lambda: wpa.announced(wpa.iface, INTERFACE_IFACE, "State", "disconnected")
        == {"standard", "legacy"})


async def test_create_interface_errors(wpa):
    err = await error_of(wpa.create_interface("lo"))
    assert (err.type, err.text) == ("fi.w1.wpa_supplicant1.InterfaceExists",
                                    "wpa_supplicant already controls this interface.")
    err = await error_of(wpa.create_interface("nosuch0"))
    assert (err.type, err.text) == ("fi.w1.wpa_supplicant1.UnknownError",
                                    "wpa_supplicant couldn't grab this interface.")
    err = await error_of(wpa.call(ROOT_PATH, ROOT_IFACE, "CreateInterface", "a{sv}",
                                   [{"Driver": Variant("s", "none")}]))
    assert err.type == "fi.w1.wpa_supplicant1.InvalidArgs"


async def test_remove_interface_removes_networks_first(wpa):
    net = await wpa.add_network(wpa.iface, ssid="a")
    await wpa.call(ROOT_PATH, ROOT_IFACE, "RemoveInterface", "o", [wpa.iface])
    order = [(s.member, s.body[0]) for s in wpa.signals
             if s.member in ("NetworkRemoved", "InterfaceRemoved")]
    assert order == [("NetworkRemoved", net), ("InterfaceRemoved", wpa.iface)]

    err = await error_of(wpa.get_interface("lo"))
    assert err.type == "fi.w1.wpa_supplicant1.InterfaceUnknown"
    again = await wpa.create_interface("lo")
    assert again != wpa.iface, "interface paths are not reused"


# --- the interface object --------------------------------------------------------------

async def test_interface_properties_when_not_connected(wpa):
    current = await wpa.get(wpa.iface, INTERFACE_IFACE, "CurrentNetwork")
    assert (current.signature, current.value) == ("o", "/")
    ifname = await wpa.get(wpa.iface, INTERFACE_IFACE, "Ifname")
    assert (ifname.signature, ifname.value) == ("s", "lo")
    scanning = await wpa.get(wpa.iface, INTERFACE_IFACE, "Scanning")
    assert scanning.signature == "b"
    state = await wpa.get(wpa.iface, INTERFACE_IFACE, "State")
    assert state.signature == "s" and state.value in ("disconnected", "inactive")

    everything = (await wpa.call(wpa.iface, "org.freedesktop.DBus.Properties", "GetAll", "s",
                                 [INTERFACE_IFACE]))[0]
    assert {"CurrentNetwork", "State", "Scanning", "Ifname", "Networks"} <= set(everything)


async def test_signal_poll_fails_when_not_associated(wpa):
    err = await error_of(wpa.call(wpa.iface, INTERFACE_IFACE, "SignalPoll"))
    assert (err.type, err.text) == ("org.freedesktop.DBus.Error.Failed", "Failed to read signal")


async def test_scan_is_followed_by_scan_done(wpa):
    await wpa.call(wpa.iface, INTERFACE_IFACE, "Scan", "a{sv}", [{"Type": Variant("s", "passive")}])
    done = await assert_eventually(lambda: wpa.signals_of("ScanDone", wpa.iface, INTERFACE_IFACE))
    # Driver "none" cannot scan: the scan is accepted and reported as failed.
    assert [(s.signature, s.body) for s in done] == [("b", [False])]
    # The request nm-scanguard makes when it releases on a weak signal (Supplicant.scan).
    await Supplicant(wpa.bus).scan(wpa.iface)
    await assert_eventually(lambda: len(wpa.signals_of("ScanDone", wpa.iface, INTERFACE_IFACE)) == 2)
    assert wpa.signals_of("ScanDone", wpa.iface, INTERFACE_IFACE)[1].body == [False]

    err = await error_of(wpa.call(wpa.iface, INTERFACE_IFACE, "Scan", "a{sv}",
                                   [{"Type": Variant("s", "bogus")}]))
    assert (err.type, err.text) == ("fi.w1.wpa_supplicant1.InvalidArgs",
                                    "Did not receive correct message arguments.")


async def test_abort_scan_without_a_scan_running(wpa):
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
    # Right after a (failing) scan request the interface says it is not scanning, either.
    await wpa.call(wpa.iface, INTERFACE_IFACE, "Scan", "a{sv}", [{"Type": Variant("s", "passive")}])
    await assert_eventually(lambda: wpa.signals_of("ScanDone", wpa.iface, INTERFACE_IFACE))
    err = await error_of(wpa.call(wpa.iface, INTERFACE_IFACE, "AbortScan"))
    assert err.type == SCAN_ERROR


async def test_network_paths_take_highest_id_plus_one(wpa):
    first = await wpa.add_network(wpa.iface, ssid="a")
    second = await wpa.add_network(wpa.iface, ssid="b")
    assert (first, second) == (f"{wpa.iface}/Networks/0", f"{wpa.iface}/Networks/1")
    await wpa.call(wpa.iface, INTERFACE_IFACE, "RemoveNetwork", "o", [first])
    assert await wpa.add_network(wpa.iface, ssid="c") == f"{wpa.iface}/Networks/2"


async def test_remove_network_errors(wpa):
    err = await error_of(wpa.call(wpa.iface, INTERFACE_IFACE, "RemoveNetwork", "o", ["/bogus"]))
    assert (err.type, err.text) == ("fi.w1.wpa_supplicant1.InvalidArgs",
                                    "Did not receive correct message arguments.")
    err = await error_of(wpa.call(wpa.iface, INTERFACE_IFACE, "RemoveNetwork", "o",
                                   [f"{wpa.iface}/Networks/77"]))
    assert (err.type, err.text) == ("fi.w1.wpa_supplicant1.NetworkUnknown",
                                    "There is no such a network in this interface.")


async def test_select_then_remove_current_network(wpa):
    net = await wpa.add_network(wpa.iface, ssid="myssid", psk="secretpass", bgscan=NM_BGSCAN)
    await wpa.call(wpa.iface, INTERFACE_IFACE, "SelectNetwork", "o", [net])

    assert [s.body for s in wpa.signals_of("NetworkSelected", wpa.iface)] == [[net]]
    assert (await wpa.get(wpa.iface, INTERFACE_IFACE, "CurrentNetwork")).value == net
    await assert_eventually(
        lambda: wpa.announced(net, NETWORK_IFACE, "Enabled", True) == {"standard", "legacy"})
    # Selecting does not announce CurrentNetwork (only association would).
    assert not any("CurrentNetwork" in values
                   for _, values in wpa.property_changes(wpa.iface, INTERFACE_IFACE))

    await wpa.call(wpa.iface, INTERFACE_IFACE, "RemoveNetwork", "o", [net])
    assert [s.body for s in wpa.signals_of("NetworkRemoved", wpa.iface)] == [[net]]
    await assert_eventually(
        lambda: wpa.announced(wpa.iface, INTERFACE_IFACE, "CurrentNetwork", "/")
        == {"standard", "legacy"})
    assert (await wpa.get(wpa.iface, INTERFACE_IFACE, "CurrentNetwork")).value == "/"


# --- network objects: Properties -------------------------------------------------------

async def test_add_network_reads_back_quoted_without_psk(wpa):
    net = await wpa.add_network(wpa.iface, ssid="myssid", psk="secretpass", bgscan=NM_BGSCAN)
    assert re.fullmatch(re.escape(wpa.iface) + r"/Networks/\d+", net)

    props = await wpa.network_properties(net)
    assert props == expected_network(ssid='"myssid"', bgscan='"simple:30:-70:86400"')
    assert "psk" not in props
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


async def test_bgscan_only_set_and_restore(wpa):
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


async def test_writing_back_the_quoted_value_quotes_it_again(wpa):
    net = await wpa.add_network(wpa.iface, ssid="myssid", bgscan=NM_BGSCAN)
    read = (await wpa.network_properties(net))["bgscan"]
    await wpa.set_network_properties(net, {"bgscan": Variant("s", read)})
    assert (await wpa.network_properties(net))["bgscan"] == '""simple:30:-70:86400""'


async def test_network_without_bgscan(wpa):
    net = await wpa.add_network(wpa.iface, ssid="locked", bssid="02:00:00:00:01:00")
    props = await wpa.network_properties(net)
    assert "bgscan" not in props
    assert props == expected_network(ssid='"locked"', bssid="02:00:00:00:01:00")

    # Once set, even to "", the key stays: there is no way back to "absent".
    await wpa.set_network_properties(net, {"bgscan": Variant("s", "")})
    assert (await wpa.network_properties(net))["bgscan"] == '""'


async def test_set_properties_value_types_and_errors(wpa):
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


async def test_property_errors(wpa):
    net = await wpa.add_network(wpa.iface, ssid="myssid")

    err = await error_of(wpa.get(net, NETWORK_IFACE, "Nope"))
    assert (err.type, err.text) == ("org.freedesktop.DBus.Error.InvalidArgs", "No such property")
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

    # A network removed between reading and writing (NM re-activated): UnknownMethod.
    await wpa.call(wpa.iface, INTERFACE_IFACE, "RemoveNetwork", "o", [net])
    err = await error_of(wpa.set_network_properties(net, {"bgscan": Variant("s", "")}))
    assert err.type == "org.freedesktop.DBus.Error.UnknownMethod"
    err = await error_of(wpa.get(net, NETWORK_IFACE, "Properties"))
    assert err.type == "org.freedesktop.DBus.Error.UnknownMethod"


async def test_enabled_changes_are_announced(wpa):
    net = await wpa.add_network(wpa.iface, ssid="myssid")
    await wpa.set(net, NETWORK_IFACE, "Enabled", Variant("b", True))
    assert (await wpa.get(net, NETWORK_IFACE, "Enabled")).value is True
    assert (await wpa.network_properties(net))["disabled"] == "0"
    await assert_eventually(
        lambda: wpa.announced(net, NETWORK_IFACE, "Enabled", True) == {"standard", "legacy"})


# --- D-Bus policy: Debian lets group netdev talk to wpa_supplicant -------------------------

_POLICY_FILES = [Path("/usr/share/dbus-1/system.d/wpa_supplicant.conf"),
                 Path("/etc/dbus-1/system.d/wpa_supplicant.conf")]

_CLIENT = r"""
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
from nm_scanguard.dbuslib import BusType, MessageBus, Variant
from nm_scanguard.peers.supplicant import Supplicant
from tests.contract.wpaclient import WpaClient

async def main():
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    client = WpaClient(bus)
    try:
        iface = await client.get_interface("lo")
        net = sys.argv[2]
        await client.set_network_properties(net, {"bgscan": Variant("s", "")})
        result = {"iface": iface, "bgscan": (await client.network_properties(net))["bgscan"]}
        await Supplicant(bus).scan(iface)  # asked for on a release for a weak signal
        result["scan"] = "accepted"
    except Exception as e:
        result = {"error": getattr(e, "type", repr(e))}
    print(json.dumps(result))

asyncio.run(main())
"""


def _run_as(uid: int, gid: int, groups: str, address: str, net: str) -> dict:
    """Run the client above as another user; *groups* is setpriv's --groups (or "" for none)."""
    repo = Path(__file__).resolve().parents[2]
    group_args = [f"--groups={groups}"] if groups else ["--clear-groups"]
    out = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", *group_args, "--",
         "/usr/bin/python3", "-c", _CLIENT, str(repo), net],
        env={"DBUS_SYSTEM_BUS_ADDRESS": address, "PATH": "/usr/bin:/bin",
             "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


async def test_policy_netdev_member_may_configure(tmp_path):
    """On a default-deny bus with Debian's policy file, netdev may call; others may not."""
    policy = next((p for p in _POLICY_FILES if p.exists()), None)
    if policy is None:
        pytest.fail("no wpa_supplicant D-Bus policy file installed (apt install wpasupplicant)")
    if os.geteuid() != 0 or not os.access(WPA_SUPPLICANT, os.X_OK):
        pytest.fail("needs root and the real wpa_supplicant (run `make test` as root)")
    import grp
    netdev = grp.getgrnam("netdev").gr_gid
    nobody, nogroup = 65534, 65534

    bus_daemon = start_private_bus(DEFAULT_DENY_POLICY, [policy])
    log = tmp_path / "wpa_supplicant.log"
    env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=bus_daemon.address)
    process = subprocess.Popen([WPA_SUPPLICANT, "-u", "-dd", "-t", "-f", str(log)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    bus = None
    try:
        bus = await MessageBus(bus_address=bus_daemon.address).connect()
        root = await WpaClient.connect(bus)
        await _wait_for_name(root)
        iface = await root.create_interface("lo", "none")
        net = await root.add_network(iface, ssid="myssid", bgscan=NM_BGSCAN)

        member = await asyncio.to_thread(_run_as, nobody, nogroup, str(netdev),
                                         bus_daemon.address, net)
        assert member == {"iface": iface, "bgscan": '""', "scan": "accepted"}

        outsider = await asyncio.to_thread(_run_as, nobody, nogroup, "",
                                           bus_daemon.address, net)
        assert outsider == {"error": "org.freedesktop.DBus.Error.AccessDenied"}
    except BaseException:
        if log.exists():
            print(f"--- wpa_supplicant log ---\n{log.read_text(errors='replace')}")
        raise
    finally:
        if bus:
            bus.disconnect()
        stop_process(process)
        bus_daemon.stop()
