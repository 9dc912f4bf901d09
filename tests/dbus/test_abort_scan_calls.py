"""abort_scans on the bus: the daemon's own code against the wpa_supplicant mock's AbortScan
(its ScanError when no scan runs, and a hang), with real counters of a veth pair."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from nm_scanguard.daemon.guard.scans import AT_ENGAGE, WHILE_GUARDING
from nm_scanguard.peers.supplicant import SCAN_ERROR, Supplicant

from .conftest import eventually, record
from . import test_daemon as T

FAST, ORIGINAL, bgscan, suspended = T.FAST, T.ORIGINAL, T.bgscan, T.suspended
daemon = T.daemon  # the fixture

LONG_SCAN_MS = 60_000  # a scan that would keep the radio off the channel for the whole test
# No signal polls in between: the only call a guarding daemon then makes is AbortScan.
QUIET = dataclasses.replace(FAST, signal_poll_interval=3600.0)


def aborts(peers) -> int:
    return len(peers.wpa.mock_object(peers.iface).GetMethodCalls("AbortScan"))


async def scanning(peers) -> bool:
    return await Supplicant(peers.bus).scanning(peers.iface)


async def start_scan(peers) -> float:
    await peers.wpa_mock("SetScanDuration", "ou", [peers.iface, LONG_SCAN_MS])
    await peers.wpa_mock("StartScan", "o", [peers.iface])
    return time.monotonic()


async def guarding(d, link, peers, bus) -> None:
    link.send(mbit=8)
    await eventually(lambda: suspended(bus, peers.net), what="bgscan suspended")
    await eventually(lambda: d.guards[link.ifname].state == "guarding", what="guarding")


async def test_a_scan_running_as_the_guard_engages_is_aborted(bus, link, peers, daemon):
    await peers.setup()
    d = await daemon()
    await eventually(lambda: d.guards.get(link.ifname) and d.guards[link.ifname].interface.path,
                     what="guard")
    await start_scan(peers)  # bgscan's timer fired just before the transfer
    await asyncio.sleep(0.5)
    assert aborts(peers) == 0 and await scanning(peers)  # idle: left alone
    link.send(mbit=8)
    await eventually(lambda: suspended(bus, peers.net), what="bgscan suspended")
    t0 = time.monotonic()
    await eventually(lambda: not scanning_sync(d, link), what="scan aborted")
    record("abort at engage (bgscan \"\" -> Scanning false)", time.monotonic() - t0)
    guard = d.guards[link.ifname]
    await eventually(lambda: guard.scans.scans_aborted[AT_ENGAGE] == 1, what="counted")
    assert aborts(peers) == 1 and not await scanning(peers)
    assert guard.scans.scans_aborted[WHILE_GUARDING] == 0 and guard.status().error == ""
    assert "1 aborted" in d.guards.status_line()
    assert await bgscan(bus, peers.net) == ""


def scanning_sync(d, link) -> bool:
    return d.guards[link.ifname].scans.scanning


async def test_a_scan_that_starts_while_guarding_is_aborted_at_once(bus, link, peers, daemon):
    await peers.setup()
    d = await daemon()
    await guarding(d, link, peers, bus)
    guard = d.guards[link.ifname]
    for n in (1, 2):
        t0 = await start_scan(peers)
        await eventually(lambda: guard.scans.scans_aborted[WHILE_GUARDING] == n, what=f"abort {n}")
        record("abort while guarding (StartScan -> aborted)", time.monotonic() - t0)
        assert not await scanning(peers)
    assert aborts(peers) == 2 and guard.scans.scans_guarding == 2  # they did start: counted too
    link.stop()
    await eventually(lambda: bgscan(bus, peers.net), what="restored")
    assert await bgscan(bus, peers.net) == ORIGINAL
    await eventually(lambda: guard.state == "idle", what="idle")
    await start_scan(peers)  # idle again: scans are left alone
    await asyncio.sleep(0.5)
    assert aborts(peers) == 2 and await scanning(peers)


async def test_no_scan_in_progress_is_a_race_not_a_failure(bus, link, peers, daemon):
    await peers.setup()
    d = await daemon(QUIET)
    await guarding(d, link, peers, bus)
    guard = d.guards[link.ifname]
    # The scan ends between its announcement and our AbortScan: ScanError, as from 2.10.
    await peers.wpa_mock("SetFailNext", "su", [SCAN_ERROR, 1])
    await start_scan(peers)
    await eventually(lambda: faults_left(peers), what="the injected ScanError used")
    await eventually(lambda: not guard.scans._aborting, what="the abort's answer handled")
    assert guard.status().error == "" and guard.scans.scans_aborted[WHILE_GUARDING] == 0


async def faults_left(peers) -> bool:
    (faults,) = await peers.wpa_mock("GetFaults")
    return faults["fail_left"].value == 0


async def test_a_refused_abort_shows_and_guarding_goes_on(bus, link, peers, daemon):
    await peers.setup()
    d = await daemon(QUIET)
    await guarding(d, link, peers, bus)
    guard = d.guards[link.ifname]
    await peers.wpa_mock("SetFailNext", "su", ["org.freedesktop.DBus.Error.AccessDenied", 1])
    await start_scan(peers)
    await eventually(lambda: "could not abort a scan" in guard.status().error, what="shown")
    assert "wpa_supplicant refused" in guard.status().error and "netdev" in guard.status().error
    assert await bgscan(bus, peers.net) == ""
    link.stop()
    await eventually(lambda: d.guards[link.ifname].state == "idle", what="released")
    assert await bgscan(bus, peers.net) == ORIGINAL


async def test_a_hung_abort_does_not_hold_up_the_release(bus, link, peers, daemon):
    """wpa_supplicant does not answer AbortScan: the scan runs on, but bgscan is restored on
    time (the abort never holds the guard's lock) and no second AbortScan piles up."""
    await peers.setup()
    d = await daemon(QUIET)
    await guarding(d, link, peers, bus)
    guard = d.guards[link.ifname]
    await peers.wpa_mock("SetAbortHang", "b", [True])
    try:
        await start_scan(peers)
        await eventually(lambda: guard.scans._aborting, what="AbortScan on its way")
        await peers.wpa_mock("EmitScanDone", "o", [peers.iface])
        link.stop()
        t = await eventually(lambda: bgscan(bus, peers.net), what="restored")
        assert await bgscan(bus, peers.net) == ORIGINAL
        assert t < 3.0 and guard.scans._aborting
        assert aborts(peers) == 0  # the hung one is not in the call log until carried out
    finally:
        await peers.wpa_mock("SetAbortHang", "b", [False])


@pytest.mark.parametrize("setting", ["global", "profile"])
async def test_abort_scans_off(bus, link, peers, daemon, setting):
    await peers.setup(user_data={"scanguard.abort_scans": "no"} if setting == "profile" else None)
    d = await daemon(dataclasses.replace(FAST, abort_scans=False) if setting == "global" else FAST)
    await guarding(d, link, peers, bus)
    await start_scan(peers)
    await asyncio.sleep(1.0)
    assert aborts(peers) == 0 and await scanning(peers)
    assert d.guards[link.ifname].settings.abort_scans is False
