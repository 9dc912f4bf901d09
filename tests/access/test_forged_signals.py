"""Signals trusted only from their real sender, on a bus with Debian's default policy.

Debian's system.conf lets every user send any signal (`<allow send_type="signal"/>`), and a
signal addressed to a connection's unique name reaches it whatever its match rules say.  Each
test takes a hold as root, so that bgscan is suspended, then has a client running as `nobody`
send the daemon one signal that looks like the bus's, wpa_supplicant's or NetworkManager's.
The suspension must stand (bgscan "", the hold active, no AbortScan, no scan counted), and
the release must still restore bgscan: a daemon that believed the forgery would have dropped
its suspension and left bgscan off.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nm_scanguard.peers.bus import call
from nm_scanguard.names import BUS_NAME, DBUS
from tests.api.harness import BGSCAN, api_call, error_of, props
from tests.conftest import assert_eventually

QUOTED = f'"{BGSCAN}"'
WPAS = "fi.w1.wpa_supplicant1"
CAFE = "Café ☕"


def forged(kind: str, scenario: Any) -> dict[str, Any]:
    """The signal a local user sends, as a request for tests/access/client.py."""
    if kind == "wpa_supplicant-left":
        return dict(path=DBUS[1], iface=DBUS[2], member="NameOwnerChanged", sig="sss",
                    body=[WPAS, ":1.5", ""])
    if kind == "networkmanager-left":
        return dict(path=DBUS[1], iface=DBUS[2], member="NameOwnerChanged", sig="sss",
                    body=["org.freedesktop.NetworkManager", ":1.4", ""])
    if kind == "network-removed":
        return dict(path=scenario.iface, iface=WPAS + ".Interface", member="NetworkRemoved",
                    sig="o", body=[scenario.net])
    if kind == "current-network-gone":
        return dict(path=scenario.iface, iface="org.freedesktop.DBus.Properties",
                    member="PropertiesChanged", sig="sa{sv}as", body=[WPAS + ".Interface"],
                    props={"CurrentNetwork": ["o", "/"]})
    if kind == "scanning":
        return dict(path=scenario.iface, iface="org.freedesktop.DBus.Properties",
                    member="PropertiesChanged", sig="sa{sv}as", body=[WPAS + ".Interface"],
                    props={"Scanning": ["b", True]})
    if kind == "scan-done":
        return dict(path=scenario.iface, iface=WPAS + ".Interface", member="ScanDone", sig="b",
                    body=[True])
    raise AssertionError(kind)


KINDS = ["wpa_supplicant-left", "networkmanager-left", "network-removed",
         "current-network-gone", "scanning", "scan-done"]


async def _daemon_unique_name(scenario: Any) -> str:
    (owner,) = await call(scenario.bus, *DBUS, "GetNameOwner", "s", [BUS_NAME])
    return str(owner)


async def _suspended_with_hold(scenario: Any) -> int:
    reply = await api_call(scenario.bus, "Hold", "sss", [CAFE, CAFE, ""])
    assert error_of(reply) is None, reply.body
    await assert_eventually(lambda: scenario.bgscan() == '""', message="bgscan suspended")
    return int(reply.body[0])


@pytest.mark.parametrize("kind", KINDS)
async def test_a_forged_peer_signal_changes_nothing(strict_scenario, nobody, kind):
    s = strict_scenario
    cookie = await _suspended_with_hold(s)
    before = await s.device()
    client = nobody()
    dest = await _daemon_unique_name(s)
    for _ in range(3):  # a forgery repeated is no truer
        assert client.request(signal=True, dest=dest, **forged(kind, s)) == {"sent": True}
    await asyncio.sleep(1.0)  # several samples (sample_interval 0.2 s in the harness's config)
    after = await s.device()
    assert s.bgscan() == '""', s.daemon.log()
    assert after["state"] == "held", after
    assert after["scans_guarding"] == before["scans_guarding"]
    assert after["scans_aborted"] == before["scans_aborted"]
    assert len((await props(s.bus))["ActiveHolds"]) == 1
    log = s.daemon.log()
    assert "left the bus" not in log and "aborted" not in log.lower()
    reply = await api_call(s.bus, "Release", "u", [cookie])
    assert error_of(reply) is None, reply.body
    await assert_eventually(lambda: s.bgscan() == QUOTED, message="bgscan restored on release")


async def test_a_forged_holder_left_does_not_end_someone_elses_hold(strict_scenario, nobody):
    s = strict_scenario
    cookie = await _suspended_with_hold(s)
    client = nobody()
    dest = await _daemon_unique_name(s)
    assert client.request(signal=True, dest=dest, path=DBUS[1], iface=DBUS[2],
                          member="NameOwnerChanged", sig="sss",
                          body=[s.bus.unique_name, s.bus.unique_name, ""]) == {"sent": True}
    await asyncio.sleep(0.5)
    assert [h["cookie"] for h in (await props(s.bus))["ActiveHolds"]] == [cookie]
    assert s.bgscan() == '""'
    reply = await api_call(s.bus, "Release", "u", [cookie])
    assert error_of(reply) is None, reply.body
    await assert_eventually(lambda: s.bgscan() == QUOTED, message="bgscan restored on release")
