"""Aborting the scans that still run while guarding (abort_scans): when, when not, and what a
failed, refused or late abort leaves.  A Guard with the fakes of test_guard."""

from __future__ import annotations

import logging

import pytest

from nm_scanguard.daemon.guard import policy as P
from nm_scanguard.daemon.guard.guard import Guard
from nm_scanguard.daemon.guard.scans import AT_ENGAGE, WHILE_GUARDING
from nm_scanguard.peers.supplicant import SCAN_ERROR
from tests.unit.daemon.guard import test_guard as G
from tests.unit.daemon.bgscan.test_suspension import NET0, NM_BGSCAN

SETTINGS, run = G.SETTINGS, G.run
parts, guard = G.parts, G.guard  # the fixtures of test_guard

NO_REPLY = "org.freedesktop.DBus.Error.NoReply"
ACCESS_DENIED = "org.freedesktop.DBus.Error.AccessDenied"


async def engage(guard: Guard, parts) -> None:
    await guard.step()
    await run(guard, parts["counters"], 8, 2)
    assert guard.state == P.GUARDING and guard.engaged


async def fade(guard: Guard, parts, rssi: int) -> None:
    parts["sup"].rssi = rssi
    guard.policy._last_poll = None  # the next sample polls (the poll interval is wall-clock)
    await run(guard, parts["counters"], 8, 1)


def scan_starts(guard: Guard, parts) -> None:
    """wpa_supplicant starts a scan and announces Scanning (as the daemon passes it on)."""
    parts["sup"].is_scanning = True
    guard.scans.scanning_changed(True)


async def test_a_scan_running_when_the_guard_engages_is_aborted_once(guard, parts, caplog):
    sup, listener = parts["sup"], parts["listener"]
    await guard.step()
    scan_starts(guard, parts)  # bgscan's timer fired in the engage_after window
    assert listener.beside == []  # idle: scans are left alone
    with caplog.at_level(logging.INFO, logger="scanguard"):
        await run(guard, parts["counters"], 8, 2)
        assert guard.state == P.GUARDING
        assert await listener.run() == 1
    assert sup.aborts == [guard.interface.path] and not sup.is_scanning
    assert guard.scans.scans_aborted == {AT_ENGAGE: 1, WHILE_GUARDING: 0}
    assert "aborted a scan that was running when the guard engaged" in caplog.text
    assert guard.status().scans_aborted == {AT_ENGAGE: 1, WHILE_GUARDING: 0}
    # Still guarding, bgscan still suspended: the abort touched neither.
    await run(guard, parts["counters"], 8, 3)
    assert await listener.run() == 0 and sup.aborts == [guard.interface.path]
    assert sup.networks[NET0]["bgscan"] == ""


async def test_a_scan_that_starts_while_guarding_is_aborted(guard, parts):
    sup, listener = parts["sup"], parts["listener"]
    await engage(guard, parts)
    assert listener.beside == []  # nothing was scanning as it engaged
    for n in (1, 2, 3):  # GeoClue every 10 s
        scan_starts(guard, parts)
        assert await listener.run() == 1
        guard.scans.scanning_changed(False)
        assert guard.scans.scans_aborted[WHILE_GUARDING] == n
    assert len(sup.aborts) == 3


async def test_held_and_no_bgscan_abort_too(guard, parts):
    guard.hold_changed(True)
    assert await guard.kick() and guard.state == P.HELD
    scan_starts(guard, parts)
    assert await parts["listener"].run() == 1
    assert guard.scans.scans_aborted[WHILE_GUARDING] == 1


async def test_no_abort_while_idle_or_released_for_a_weak_signal(guard, parts):
    sup, listener = parts["sup"], parts["listener"]
    await guard.step()
    scan_starts(guard, parts)
    guard.scans.scanning_changed(False)
    await engage(guard, parts)
    await fade(guard, parts, -90)  # below the floor: released so that it can roam
    assert guard.state == P.WEAK and sup.networks[NET0]["bgscan"] == NM_BGSCAN
    assert sup.scans  # our own roaming scan
    scan_starts(guard, parts)  # bgscan's and ours: roaming needs them
    guard.scans.scanning_changed(False)
    scan_starts(guard, parts)
    assert await listener.run() == 0 and sup.aborts == []


async def test_our_own_roaming_scan_is_not_aborted_when_guarding_resumes(guard, parts):
    sup, listener = parts["sup"], parts["listener"]
    await engage(guard, parts)
    await fade(guard, parts, -90)
    assert guard.state == P.WEAK and sup.scans
    scan_starts(guard, parts)  # our scan starts...
    await fade(guard, parts, -50)  # ...and the signal is back before it ends
    assert guard.state == P.GUARDING
    assert await listener.run() == 0 and sup.aborts == []
    guard.scans.scanning_changed(False)  # ours ended: the next scan is someone else's
    scan_starts(guard, parts)
    assert await listener.run() == 1 and guard.scans.scans_aborted[WHILE_GUARDING] == 1


async def test_abort_scans_off_leaves_scans_alone(guard, parts):
    guard.update(guard.dev, SETTINGS.with_values({"abort_scans": False}, "profile Café ☕"))
    await guard.step()
    scan_starts(guard, parts)
    await run(guard, parts["counters"], 8, 2)
    assert guard.state == P.GUARDING
    guard.scans.scanning_changed(True)
    assert await parts["listener"].run() == 0 and parts["sup"].aborts == []
    assert guard.status().scans_aborted == {AT_ENGAGE: 0, WHILE_GUARDING: 0}
    assert guard.status().settings["abort_scans"] is False


async def test_a_scan_that_ended_first_is_no_failure(guard, parts):
    """AbortScan racing the scan's end: wpa_supplicant answers ScanError, which is normal."""
    sup, listener = parts["sup"], parts["listener"]
    await engage(guard, parts)
    guard.scans.scanning_changed(True)  # announced, but over by the time AbortScan arrives
    assert await listener.run() == 1
    assert sup.aborts and guard.status().error == ""
    assert guard.scans.scans_aborted[WHILE_GUARDING] == 0


@pytest.mark.parametrize("error", [NO_REPLY, ACCESS_DENIED, SCAN_ERROR + ".Other"])
async def test_a_failed_abort_shows_and_leaves_guarding_intact(guard, parts, caplog, error):
    sup, listener = parts["sup"], parts["listener"]
    await engage(guard, parts)
    sup.abort_error = error
    with caplog.at_level(logging.WARNING, logger="scanguard"):
        for _ in range(3):  # the same failure again: shown, logged once
            scan_starts(guard, parts)
            assert await listener.run() == 1
    assert "could not abort a scan" in guard.status().error
    assert sum("could not abort" in r.getMessage() for r in caplog.records) == 1
    assert guard.engaged and sup.networks[NET0]["bgscan"] == ""
    assert guard.scans.scans_aborted == {AT_ENGAGE: 0, WHILE_GUARDING: 0}
    sup.abort_error = None
    scan_starts(guard, parts)
    assert await listener.run() == 1
    assert guard.status().error == "" and guard.scans.scans_aborted[WHILE_GUARDING] == 1
    # Released as usual: the abort never held the lock nor touched bgscan.
    await run(guard, parts["counters"], 0, 2)
    assert guard.state == P.IDLE and sup.networks[NET0]["bgscan"] == NM_BGSCAN


async def test_one_abort_at_a_time_and_none_after_release(guard, parts):
    """A wpa_supplicant that does not answer AbortScan: scans announced meanwhile do not pile up
    calls, and an abort that waited until the guard released is not sent."""
    sup, listener = parts["sup"], parts["listener"]
    await engage(guard, parts)
    scan_starts(guard, parts)
    guard.scans.scanning_changed(True)  # again, while the first is on its way
    assert len(listener.beside) == 1
    await run(guard, parts["counters"], 0, 2)  # released before the abort ran
    assert guard.state == P.IDLE
    assert await listener.run() == 1 and sup.aborts == []
    await engage(guard, parts)
    assert await listener.run() == 1 and len(sup.aborts) == 1  # the scan still runs: at engage


async def test_attach_reads_whether_a_scan_is_running(guard, parts):
    """A scan that started before the guard watched is known, so engaging aborts it."""
    parts["sup"].is_scanning = True
    await guard.attach()
    try:
        assert not guard.scans.scanning  # read beside the sampling, not before it
        assert await parts["listener"].run() == 2  # Scanning, and the access points known
        assert guard.scans.scanning
    finally:
        await guard.stop()


async def test_an_announcement_beats_a_slow_read_at_attach(guard, parts):
    parts["sup"].is_scanning = True
    await guard.attach()
    try:
        guard.scans.scanning_changed(False)  # the scan ended while the read was on its way
        assert await parts["listener"].run() == 2  # Scanning, and the access points known
        assert not guard.scans.scanning
    finally:
        await guard.stop()
