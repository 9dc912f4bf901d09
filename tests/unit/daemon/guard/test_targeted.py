"""Roaming by targeted scans (daemon/guard/targeted.py), on a Guard with fakes: which path a fade
takes, the channels scanned, when to ask for a Roam, the fallback, and the refresh scans."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import pytest

from nm_scanguard.daemon.guard import policy as P
from nm_scanguard.daemon.guard import roaming, targeted
from nm_scanguard.daemon.guard.guard import Guard
from nm_scanguard.daemon.guard.targeted import (
    MOVE_GAP,
    REFRESH_GAP,
    ROAM_MARGIN_DB,
    TARGETED_LIMIT,
    WALK_BEFORE_FLOOR_DB,
    WALK_DROP_DB,
    WALK_GAP,
    WALK_MARGIN_DB,
    bgscan_threshold,
)
from nm_scanguard.peers.supplicant import Bss
from tests.unit.daemon.guard import test_guard as G
from tests.unit.daemon.guard.test_abort import engage, fade
from tests.unit.daemon.guard.test_guard import ACCESS_DENIED, SETTINGS
from tests.unit.daemon.bgscan.test_suspension import IFACE0, NET0, NM_BGSCAN

parts, guard = G.parts, G.guard  # the fixtures of test_guard
NO_REPLY = "org.freedesktop.DBus.Error.NoReply"
SSIDS = [b"home", "Café ☕".encode()]


def ap(n: int, ssid: bytes, freq: int, signal: int) -> Bss:
    return Bss(f"{IFACE0}/BSSs/{n}", f"02:00:00:00:0{n}:00", ssid, freq, signal, "wpa-psk")


@pytest.fixture(params=SSIDS, ids=["ascii", "non-ascii"])
def two_aps(request, parts) -> tuple[Bss, Bss]:
    """The station with AP1 (2412 MHz); AP2 of the same network on 5180 MHz."""
    ap1, ap2 = ap(1, request.param, 2412, -60), ap(2, request.param, 5180, -50)
    parts["sup"].bss_list = [ap1, ap2, ap(3, b"neighbour", 2437, -40)]
    parts["sup"].current_bss_path = ap1.path
    return ap1, ap2


@pytest.fixture
def clock(monkeypatch) -> list[float]:
    now = [5000.0]
    monkeypatch.setattr(targeted.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(roaming.time, "monotonic", lambda: now[0])
    return now


async def learned(guard: Guard, parts) -> None:
    """The guard starts: it reads the access points wpa_supplicant knows."""
    await guard.targeted.learn()
    await engage(guard, parts)


async def scan_ends(guard: Guard, parts) -> None:
    guard.scans.scanning_changed(True)
    guard.scan_done()
    guard.scans.scanning_changed(False)
    await parts["listener"].run()


async def test_a_fade_with_another_ap_known_scans_its_channel_and_keeps_bgscan_off(
        guard, parts, two_aps, clock, caplog):
    sup = parts["sup"]
    caplog.set_level(logging.INFO, "scanguard")
    await learned(guard, parts)
    await fade(guard, parts, -85)
    assert guard.state == P.ROAMING and guard.engaged
    assert sup.networks[NET0]["bgscan"] == ""  # bgscan kept off: no scan of every channel
    assert sup.scan_channels == [(2412, 5180)]  # the current channel and the other AP's
    assert "scanning the channels of this network's access points to roam, bgscan kept off" \
        in guard.reason
    assert guard.status().own_scans and guard.roaming.own[-1].kind == "targeted"
    guard.scans.scanning_changed(True)  # our scan starts while guarded: never aborted
    assert parts["listener"].beside == [] and sup.aborts == []


async def test_a_reconcile_while_the_fade_is_taken_on_finds_it_roaming(guard, parts, two_aps,
                                                                     clock, caplog):
    """The daemon's sync reconciles a guard at any time.  One that runs while the targeted
    path reads where the station is (CurrentBSS, slow to answer) finds the fade taken on
    (ROAMING, bgscan kept off), not a weak signal to release bgscan and scan every channel
    for."""
    sup = parts["sup"]
    caplog.set_level(logging.INFO, "scanguard")
    await learned(guard, parts)
    answer = asyncio.Event()
    read = sup.current_bss

    async def slow(iface_path: str) -> str | None:
        await answer.wait()
        return await read(iface_path)

    sup.current_bss = slow
    sup.rssi = -85
    guard.policy._last_poll = None  # this sample polls the signal
    parts["counters"].traffic(8)
    step = asyncio.create_task(guard.step())
    for _ in range(50):  # the step runs until it waits for the answer
        await asyncio.sleep(0)
    assert not step.done()
    await guard.reconcile()  # the daemon's sync, while the read is on its way
    assert guard.state == P.ROAMING and guard.engaged
    assert sup.networks[NET0]["bgscan"] == "" and sup.scan_channels == []
    answer.set()
    await step
    assert sup.scan_channels == [(2412, 5180)]  # the targeted scan, no scan of every channel
    assert "asked wpa_supplicant for a targeted scan of 2412 MHz, 5180 MHz" in caplog.text


async def test_when_wpa_supplicant_does_not_move_a_clearly_better_ap_is_roamed_to(
        guard, parts, two_aps, clock):
    sup = parts["sup"]
    ap1, ap2 = two_aps
    await learned(guard, parts)
    await fade(guard, parts, -85)
    sup.bss_list = [ap1._replace(signal=-85), ap2._replace(signal=-85 + ROAM_MARGIN_DB)]
    await scan_ends(guard, parts)
    await fade(guard, parts, -85)
    assert sup.roams == [ap2.bssid] and guard.targeted.roams == 1
    sup.rssi = -50  # moved: the next sample sees the new AP's signal
    await fade(guard, parts, -50)
    assert guard.state == P.GUARDING and sup.networks[NET0]["bgscan"] == ""
    assert sup.scan_channels == [(2412, 5180)]  # no scan of every channel at all


async def test_an_ap_not_better_by_the_margin_is_left_to_wpa_supplicant(guard, parts, two_aps,
                                                                        clock):
    sup = parts["sup"]
    ap1, ap2 = two_aps
    await learned(guard, parts)
    await fade(guard, parts, -85)
    sup.bss_list = [ap1._replace(signal=-85), ap2._replace(signal=-85 + ROAM_MARGIN_DB - 1)]
    await scan_ends(guard, parts)
    await fade(guard, parts, -85)
    assert sup.roams == [] and guard.state == P.ROAMING


async def test_wpa_supplicant_that_moved_by_itself_is_not_asked_to_roam(guard, parts, two_aps,
                                                                        clock):
    sup = parts["sup"]
    await learned(guard, parts)
    await fade(guard, parts, -85)
    sup.current_bss_path = two_aps[1].path  # its own rule moved it on the scan's results
    await scan_ends(guard, parts)
    await fade(guard, parts, -52)
    assert sup.roams == [] and guard.state == P.GUARDING


async def test_the_targeted_path_gives_up_after_its_limit_release_and_full_scan(
        guard, parts, two_aps, clock, caplog):
    sup = parts["sup"]
    caplog.set_level(logging.INFO, "scanguard")
    await learned(guard, parts)
    await fade(guard, parts, -85)
    assert guard.state == P.ROAMING
    clock[0] += TARGETED_LIMIT
    await fade(guard, parts, -85)
    assert guard.state == P.WEAK and not guard.engaged
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN
    assert sup.scan_channels == [(2412, 5180), ()]  # then the scan of every channel
    assert "targeted roaming gave up: the station did not leave the fade" in caplog.text
    await fade(guard, parts, -85)
    assert guard.state == P.WEAK  # not again in this fade
    await fade(guard, parts, -50)
    await fade(guard, parts, -85)  # a new fade: the targeted path again
    assert guard.state == P.ROAMING and sup.scan_channels[-1] == (2412, 5180)


async def test_no_other_ap_known_falls_back_to_release_and_a_scan_of_every_channel(
        guard, parts, clock, caplog):
    sup = parts["sup"]
    caplog.set_level(logging.INFO, "scanguard")
    await engage(guard, parts)
    await fade(guard, parts, -85)
    assert guard.state == P.WEAK and sup.networks[NET0]["bgscan"] == NM_BGSCAN
    assert sup.scan_channels == [()]
    assert "no other access point of this network is known" in caplog.text


async def test_roam_scans_full_keeps_today_s_path(guard, parts, two_aps, clock):
    sup = parts["sup"]
    guard.update(guard.dev, dataclasses.replace(SETTINGS, roam_scans="full"))
    await learned(guard, parts)
    await fade(guard, parts, -85)
    assert guard.state == P.WEAK and sup.scan_channels == [()]


@pytest.mark.parametrize("error", [ACCESS_DENIED, "fi.w1.wpa_supplicant1.Interface.ScanError"])
async def test_a_refused_targeted_scan_falls_back_at_once(guard, parts, two_aps, clock, error):
    sup = parts["sup"]
    await learned(guard, parts)
    sup.scan_error = error
    await fade(guard, parts, -85)
    assert guard.state == P.WEAK and sup.networks[NET0]["bgscan"] == NM_BGSCAN


async def test_an_unanswered_targeted_scan_waits_for_the_limit(guard, parts, two_aps, clock):
    sup = parts["sup"]
    await learned(guard, parts)
    sup.scan_error = NO_REPLY
    await fade(guard, parts, -85)
    assert guard.state == P.ROAMING and guard.roaming.is_ours()  # it may have started
    sup.scan_error = None
    clock[0] += TARGETED_LIMIT
    await fade(guard, parts, -85)
    assert guard.state == P.WEAK and sup.networks[NET0]["bgscan"] == NM_BGSCAN


async def test_a_refused_roam_is_shown_and_the_limit_still_falls_back(guard, parts, two_aps,
                                                                     clock):
    sup = parts["sup"]
    ap1, ap2 = two_aps
    await learned(guard, parts)
    await fade(guard, parts, -85)
    sup.roam_error = "fi.w1.wpa_supplicant1.InvalidArgs"
    sup.bss_list = [ap1._replace(signal=-85), ap2._replace(signal=-40)]
    await scan_ends(guard, parts)
    await fade(guard, parts, -85)
    assert f"cannot move to the stronger access point {ap2.bssid}" in guard.status().error
    clock[0] += TARGETED_LIMIT
    await fade(guard, parts, -85)
    assert guard.state == P.WEAK and sup.networks[NET0]["bgscan"] == NM_BGSCAN
    assert "cannot move" in guard.status().error  # still the fade the refusal was about
    await fade(guard, parts, -60)  # the fade is over (the full scan moved it): nothing to show
    assert guard.state == P.GUARDING and "cannot move" not in guard.status().error


@pytest.mark.parametrize("read, said", [
    ("learn", "cannot read the access points wpa_supplicant found"),
    ("read_current", "cannot read which access point the station is with")])
async def test_an_unreadable_read_of_the_aps_keeps_what_is_known_and_shows_once(
        read, said, guard, parts, two_aps, clock, caplog):
    """The BSS list (read after every scan) and the current AP (read each sample of a fade)."""
    sup = parts["sup"]
    caplog.set_level(logging.INFO, "scanguard")
    await learned(guard, parts)
    sup.bss_error = ACCESS_DENIED
    await getattr(guard.targeted.station, read)()
    await getattr(guard.targeted.station, read)()  # the same failure again: logged once
    assert said in guard.status().error
    assert caplog.text.count(said) == 1
    assert len(guard.targeted.candidates.known("u-1")) == 2
    assert guard.targeted.current == two_aps[0]
    sup.bss_error = None
    await getattr(guard.targeted.station, read)()
    assert said not in guard.status().error


async def test_a_restarted_wpa_supplicant_takes_the_unreadable_list_with_it(guard, parts,
                                                                            two_aps, clock):
    await learned(guard, parts)
    parts["sup"].bss_error = ACCESS_DENIED
    await guard.targeted.learn()
    guard.supplicant_restarted()
    assert "cannot read the access points" not in guard.status().error


async def test_with_roam_scans_full_nothing_is_read_for_the_candidates(guard, parts, two_aps,
                                                                      clock):
    guard.update(guard.dev, dataclasses.replace(SETTINGS, roam_scans="full"))
    await learned(guard, parts)
    await scan_ends(guard, parts)
    assert parts["sup"].bss_reads == 0 and guard.status().roam_candidates == []


async def test_the_current_ap_is_read_alone_not_with_the_whole_list(guard, parts, two_aps,
                                                                   clock):
    sup = parts["sup"]
    await learned(guard, parts)
    sup.current_bss_path = two_aps[1].path  # moved: the next fade reads only the new AP

    async def whole_list(iface_path: str) -> list[Bss]:
        raise AssertionError("the whole BSS list was read to find the current AP")
    sup.bsses = whole_list
    await guard.targeted.station.read_current()
    assert guard.targeted.current == two_aps[1]


async def test_refresh_scans_one_candidate_channel_while_marginal_none_above_threshold(
        guard, parts, two_aps, clock):
    sup = parts["sup"]
    await learned(guard, parts)
    threshold = bgscan_threshold(NM_BGSCAN)
    await fade(guard, parts, threshold + 5)  # above bgscan's threshold: no scan at all
    clock[0] += REFRESH_GAP
    await fade(guard, parts, threshold + 5)
    assert sup.scan_channels == []
    await fade(guard, parts, threshold - 2)  # marginal: above the floor, below the threshold
    assert sup.scan_channels == [(5180,)] and guard.state == P.GUARDING
    await scan_ends(guard, parts)
    await fade(guard, parts, threshold - 2)
    assert sup.scan_channels == [(5180,)]  # one per REFRESH_GAP
    clock[0] += REFRESH_GAP
    await fade(guard, parts, threshold - 2)
    assert sup.scan_channels == [(5180,), (5180,)]


def test_bgscan_threshold_is_read_off_the_string_or_networkmanager_s():
    assert bgscan_threshold("simple:30:-65:300") == -65
    assert bgscan_threshold("learn:30:-70:300:/var/lib/x") == -70
    assert bgscan_threshold("simple") == targeted.BGSCAN_THRESHOLD
    assert bgscan_threshold("simple:30:Café ☕:300") == targeted.BGSCAN_THRESHOLD


async def test_the_status_shows_the_known_aps(guard, parts, two_aps, clock):
    await learned(guard, parts)
    cands: list[dict[str, Any]] = guard.status().roam_candidates
    assert [(c["bssid"], c["current"]) for c in cands] == [(two_aps[0].bssid, True),
                                                          (two_aps[1].bssid, False)]


async def test_a_guard_that_stops_learns_nothing_more(guard, parts, two_aps, clock):
    await learned(guard, parts)
    await parts["listener"].run()
    await guard.stop()
    guard.scan_done()  # a refresh scan ends while the daemon shuts down
    assert parts["listener"].beside == []


async def test_our_targeted_scan_s_end_is_not_logged_as_a_late_roaming_scan(guard, parts, two_aps,
                                                                           clock, caplog):
    caplog.set_level(logging.INFO, "scanguard")
    await learned(guard, parts)
    await fade(guard, parts, -85)
    guard.scans.scanning_changed(True)
    guard.scans.count_scan(guard.engaged)
    assert "ran after guarding resumed" not in caplog.text


async def test_a_hold_taken_at_a_weak_signal_takes_the_targeted_path_too(guard, parts, two_aps,
                                                                         clock):
    """The fade is read before bgscan is suspended (a hold's kick, or a suspend still under way
    in another reconcile): the targeted path all the same, and bgscan suspended for it."""
    sup = parts["sup"]
    await guard.targeted.learn()
    sup.rssi = -85
    guard.hold_changed(True)
    await guard.kick()
    assert guard.state == P.ROAMING and sup.networks[NET0]["bgscan"] == ""
    assert sup.scan_channels == [(2412, 5180)]


async def test_roam_scans_set_to_full_during_a_fade_releases_at_the_next_sample(guard, parts,
                                                                                two_aps, clock):
    sup = parts["sup"]
    await learned(guard, parts)
    await fade(guard, parts, -85)
    assert guard.state == P.ROAMING
    guard.update(guard.dev, dataclasses.replace(SETTINGS, roam_scans="full"))
    await fade(guard, parts, -85)
    assert guard.state == P.WEAK and sup.networks[NET0]["bgscan"] == NM_BGSCAN
    assert sup.scan_channels == [(2412, 5180), ()]


# ---- a walk: looked at before the floor -------------------------------------------------------

THRESHOLD = bgscan_threshold(NM_BGSCAN)  # -70 dBm
FIRST_LOOK = max(THRESHOLD - WALK_DROP_DB, int(SETTINGS.signal_floor_dbm) + WALK_BEFORE_FLOOR_DB)


def walk_scans(guard: Guard) -> list[tuple[int, ...]]:
    return [s.channels for s in guard.roaming.own if s.kind == "walk"]


async def sample(guard: Guard, parts, clock, rssi: int, seconds: float = 1.0) -> None:
    clock[0] += seconds
    await fade(guard, parts, rssi)


async def test_a_walk_is_looked_at_before_the_floor_and_moved_on_from_a_clearly_better_ap(
        guard, parts, two_aps, clock, caplog):
    """The signal falls 1 dB a second: no scan above bgscan's threshold, one scan of the
    candidates' channels at the first look (before the floor), and a Roam to an AP better by
    WALK_MARGIN_DB when wpa_supplicant did not move by itself; bgscan stays suspended, the
    state guarding, and no scan of every channel."""
    sup = parts["sup"]
    ap1, ap2 = two_aps
    caplog.set_level(logging.INFO, "scanguard")
    await learned(guard, parts)
    for rssi in range(-60, FIRST_LOOK, -1):
        await sample(guard, parts, clock, rssi)
        if guard.roaming.is_ours():
            await scan_ends(guard, parts)
    # above the threshold nothing; below it, the refresh's one channel
    assert sup.scan_channels == [(5180,)] and walk_scans(guard) == []
    await sample(guard, parts, clock, FIRST_LOOK)
    assert walk_scans(guard) == [(2412, 5180)] and sup.scan_channels[-1] == (2412, 5180)
    assert f"the signal fell {THRESHOLD - FIRST_LOOK} dB to {FIRST_LOOK} dBm while guarding" in caplog.text
    sup.bss_list = [ap1._replace(signal=FIRST_LOOK), ap2._replace(signal=FIRST_LOOK + WALK_MARGIN_DB)]
    await scan_ends(guard, parts)
    await sample(guard, parts, clock, FIRST_LOOK - 1)
    assert sup.roams == [ap2.bssid] and guard.targeted.roams == 1
    assert "before the floor" in caplog.text
    assert guard.state == P.GUARDING and sup.networks[NET0]["bgscan"] == ""
    assert () not in sup.scan_channels
    sup.current_bss_path = ap2.path  # the Roam done
    await guard.targeted.learn()
    move = guard.status().last_move
    assert f"from {ap1.bssid} to {ap2.bssid} (5180 MHz) on the guard's Roam, after a walk scan: " \
           f"the signal fell {THRESHOLD - FIRST_LOOK} dB to {FIRST_LOOK} dBm" in move


async def test_a_walk_scan_finding_nothing_clearly_better_leaves_wpa_supplicants_choice(
        guard, parts, two_aps, clock):
    sup = parts["sup"]
    ap1, ap2 = two_aps
    await learned(guard, parts)
    await sample(guard, parts, clock, FIRST_LOOK)
    sup.bss_list = [ap1._replace(signal=FIRST_LOOK), ap2._replace(signal=FIRST_LOOK + WALK_MARGIN_DB - 1)]
    await scan_ends(guard, parts)
    await sample(guard, parts, clock, FIRST_LOOK)
    assert sup.roams == [] and walk_scans(guard) == [(2412, 5180)]


LOW_FLOOR = dataclasses.replace(SETTINGS, signal_floor_dbm=-85.0)  # room for two looks
LOW_FIRST_LOOK = max(THRESHOLD - WALK_DROP_DB, int(LOW_FLOOR.signal_floor_dbm) + WALK_BEFORE_FLOOR_DB)


async def test_two_aps_of_equal_signal_do_not_make_the_station_flap(guard, parts, two_aps, clock):
    """A link that stays marginal with the jitter of single readings (±4 dB), the other AP as
    strong: one look on entering the band, then none (the signal never falls WALK_DROP_DB
    below it), no Roam, and the refresh's one channel every REFRESH_GAP."""
    sup = parts["sup"]
    ap1, ap2 = two_aps
    guard.update(guard.dev, LOW_FLOOR)
    await learned(guard, parts)
    sup.bss_list = [ap1._replace(signal=LOW_FIRST_LOOK), ap2._replace(signal=LOW_FIRST_LOOK)]
    jitter = [0, -3, 2, -4, 3, -2, 1, -3]
    for i in range(120):
        await sample(guard, parts, clock, LOW_FIRST_LOOK + jitter[i % len(jitter)])
        if guard.roaming.is_ours():
            await scan_ends(guard, parts)
    assert sup.roams == [] and len(walk_scans(guard)) == 1
    assert guard.state == P.GUARDING
    assert [c for c in sup.scan_channels if len(c) == 1] == [(5180,)] * 2  # refreshes, 120 s


async def test_no_move_of_ours_within_the_move_gap_of_the_last_move(guard, parts, two_aps, clock,
                                                                    caplog):
    """wpa_supplicant moved to AP2 by itself on a walk scan's results; the signal falls on AP2
    and the next walk scan finds AP1 clearly better within MOVE_GAP: the station stays.  After
    MOVE_GAP, a further fall and look: it is moved."""
    sup = parts["sup"]
    ap1, ap2 = two_aps
    caplog.set_level(logging.INFO, "scanguard")
    guard.update(guard.dev, LOW_FLOOR)
    await learned(guard, parts)
    await sample(guard, parts, clock, LOW_FIRST_LOOK)
    assert len(walk_scans(guard)) == 1
    sup.current_bss_path = ap2.path  # its own rule moved it on the walk scan's results
    sup.bss_list = [ap1._replace(signal=LOW_FIRST_LOOK), ap2._replace(signal=THRESHOLD - 1)]
    await scan_ends(guard, parts)
    await sample(guard, parts, clock, THRESHOLD - 1)
    assert "the station moved from" in caplog.text and sup.roams == []
    assert "by wpa_supplicant's own choice, after a walk scan" in guard.status().last_move
    await sample(guard, parts, clock, THRESHOLD - 1)  # steps count from AP2's signal
    on_ap2 = THRESHOLD - 1 - WALK_DROP_DB
    await sample(guard, parts, clock, on_ap2, seconds=WALK_GAP)
    assert len(walk_scans(guard)) == 2
    sup.bss_list = [ap1._replace(signal=on_ap2 + WALK_MARGIN_DB + 1), ap2._replace(signal=on_ap2)]
    await scan_ends(guard, parts)
    await sample(guard, parts, clock, on_ap2)
    assert sup.roams == [] and "but the station moved" in caplog.text
    clock[0] += MOVE_GAP
    await sample(guard, parts, clock, on_ap2 - WALK_DROP_DB)
    assert len(walk_scans(guard)) == 3
    await scan_ends(guard, parts)
    await sample(guard, parts, clock, on_ap2 - WALK_DROP_DB)
    assert sup.roams == [ap1.bssid] and guard.state == P.GUARDING


async def test_no_walk_scan_with_roam_scans_full_or_above_bgscans_threshold(guard, parts, two_aps,
                                                                            clock):
    sup = parts["sup"]
    await learned(guard, parts)
    for rssi in range(-50, THRESHOLD, -1):  # strong, down to the threshold: nothing
        await sample(guard, parts, clock, rssi, seconds=WALK_GAP)
    assert sup.scan_channels == []
    guard.update(guard.dev, dataclasses.replace(SETTINGS, roam_scans="full"))
    await sample(guard, parts, clock, FIRST_LOOK, seconds=WALK_GAP)
    await sample(guard, parts, clock, FIRST_LOOK - 1, seconds=WALK_GAP)
    assert sup.scan_channels == [] and walk_scans(guard) == []
