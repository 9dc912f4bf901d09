"""Targeted roaming over a real dbus-daemon: the daemon against the wpa_supplicant mock's BSS
objects, Scan with Channels, and Roam (their errors are pinned to the real 2.10 binary by
tests/contract/wpa_roaming_scenarios.py)."""

from __future__ import annotations

import dataclasses

import pytest

from nm_scanguard.peers.bus import call, get_property

from .conftest import eventually
from . import test_daemon as T
from .test_daemon import FAST, bgscan, restored, suspended

daemon = T.daemon  # the fixture of test_daemon

WPAS = "fi.w1.wpa_supplicant1"
AP1, AP2 = "02:00:00:00:01:00", "02:00:00:00:02:00"


@pytest.fixture(params=["Home", "Café ☕"], ids=["ascii", "non-ascii"])
def ssid(request) -> str:
    return request.param


async def two_aps(peers) -> None:
    """The network (SSID peers.ssid) on AP1 at 2412 MHz, AP2 at 5180 MHz seen."""
    for bssid, freq in ((AP1, 2412), (AP2, 5180)):
        await peers.wpa_mock("AddBSS", "oaysqns", [peers.iface, peers.ssid.encode(), bssid, freq,
                                                   -60, "wpa2-psk"])
    # The station is with AP1: the mock moves CurrentBSS on a Roam, as association would.
    await call(peers.bus, WPAS, peers.iface, WPAS + ".Interface", "Roam", "s", [AP1])


async def guarding_with_two_aps_known(bus, link, peers, daemon, ssid):
    """The daemon guarding a busy link on AP1 of network `ssid`, both access points learned;
    returns it."""
    await peers.setup(ssid=ssid)
    await two_aps(peers)
    d = await daemon()
    link.send(mbit=8)
    await eventually(lambda: suspended(bus, peers.net), what="engaged")
    guard = d.guards[link.ifname]
    await eventually(lambda: len(guard.targeted.candidates.known(guard.dev.connection_uuid)) == 2,
                     what="both access points known")
    return d


def scans(peers) -> list[dict]:
    return [dict(args[0]) for _, args in peers.wpa.mock_object(peers.iface).GetMethodCalls("Scan")]


async def test_a_fade_scans_the_known_channels_and_roams_with_bgscan_kept_off(bus, link, peers,
                                                                           daemon, ssid):
    d = await guarding_with_two_aps_known(bus, link, peers, daemon, ssid)
    guard = lambda: d.guards[link.ifname]  # noqa: E731
    await peers.wpa_mock("SetSignal", "oi", [peers.iface, -85])
    await eventually(lambda: guard().state == "roaming", what="state roaming")
    assert await bgscan(bus, peers.net) == ""  # kept off: no scan of every channel
    (scan,) = scans(peers)
    assert [list(c) for c in scan["Channels"]] == [[2412, 20], [5180, 20]]
    assert scan["Type"] == "active" and [bytes(s) for s in scan["SSIDs"]] == [ssid.encode()]
    # The mock's radio ends the scan, the daemon re-reads the BSS list; AP2 is 25 dB stronger
    # than the -85 dBm read, so it asks wpa_supplicant to roam there.
    await eventually(lambda: guard().targeted.roams == 1, what="Roam asked")
    (roam,) = peers.wpa.mock_object(peers.iface).GetMethodCalls("Roam")[1:]
    assert list(roam[1]) == [AP2]
    await peers.wpa_mock("SetSignal", "oi", [peers.iface, -50])  # with AP2 now
    await eventually(lambda: guard().state == "guarding", what="guarding again")
    assert await bgscan(bus, peers.net) == ""
    assert len(scans(peers)) == 1  # and never a scan of every channel
    status = guard().status()
    assert status.own_scan_details[-1]["kind"] == "targeted" and status.roams == 1


async def test_with_roam_scans_full_a_fade_releases_and_scans_every_channel(bus, link, peers,
                                                                         daemon, ssid):
    await peers.setup(ssid=ssid)
    await two_aps(peers)
    d = await daemon(dataclasses.replace(FAST, roam_scans="full"))
    link.send(mbit=8)
    await eventually(lambda: suspended(bus, peers.net), what="engaged")
    await peers.wpa_mock("SetSignal", "oi", [peers.iface, -85])
    await eventually(lambda: restored(bus, peers.net), what="released")
    await eventually(lambda: d.guards[link.ifname].state == "released-weak-signal",
                     what="state released-weak-signal")
    assert scans(peers) == [{"Type": "active"}]


async def test_a_refused_roam_is_shown_and_the_fade_falls_back_to_a_release(bus, link, peers,
                                                                          daemon, ssid):
    """AP2 was learned, then expired from wpa_supplicant's list (not seen since): the targeted
    scan does not see it, the Roam is refused ("Target BSS not found") and shown, and at the
    targeted path's limit the guard releases for a scan of every channel."""
    d = await guarding_with_two_aps_known(bus, link, peers, daemon, ssid)
    guard = lambda: d.guards[link.ifname]  # noqa: E731
    bss2 = [b for b in await bss_paths(peers) if await bss_bssid(peers, b) == AP2]
    await peers.wpa_mock("RemoveBSS", "o", bss2)
    await peers.wpa_mock("SetSignal", "oi", [peers.iface, -85])
    await eventually(lambda: "Target BSS not found" in guard().status().error,
                     what="the refused Roam shown")
    await eventually(lambda: restored(bus, peers.net), timeout=15.0, what="released at the limit")
    # The state is published once the release is through (restored and read back): the
    # restored value is readable on the bus a moment before.
    await eventually(lambda: guard().state == "released-weak-signal",
                     what="state released-weak-signal")
    assert scans(peers)[-1] == {"Type": "active"}


async def bss_paths(peers) -> list[str]:
    return [str(p) for p in await get_property(peers.bus, WPAS, peers.iface, WPAS + ".Interface",
                                               "BSSs")]


async def bss_bssid(peers, path: str) -> str:
    raw = await get_property(peers.bus, WPAS, path, WPAS + ".BSS", "BSSID")
    return ":".join(f"{b:02x}" for b in bytes(raw))
