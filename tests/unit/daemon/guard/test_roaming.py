"""The signal floor and roaming (daemon/guard/roaming.py) on their own: a Roaming on an Interface of
the fake wpa_supplicant of test_guard, with a real Policy fed as the guard feeds it (poll) and
real Problems, and a clock set by the test.  The guard's side (release, then the scan) is in
test_guard."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from nm_scanguard.daemon.guard import policy as P
from nm_scanguard.daemon.guard import roaming
from nm_scanguard.daemon.guard.roaming import Interface
from nm_scanguard.daemon.guard.policy import Policy
from nm_scanguard.daemon.guard.problems import Problems
from nm_scanguard.daemon.guard.roaming import OWN_SCAN_LIMIT, OWN_SCANS_KEPT, ROAM_SCAN_GAP, Roaming
from tests.unit.daemon.guard.test_guard import ACCESS_DENIED, SETTINGS, FakeView
from tests.unit.daemon.bgscan.test_suspension import IFACE0

NO_REPLY = "org.freedesktop.DBus.Error.NoReply"
GONE = "org.freedesktop.DBus.Error.UnknownObject"
SCAN_REFUSED = "fi.w1.wpa_supplicant1.Interface.ScanError"


class Owner:
    """What a Roaming works with on a Guard: the interface object, the problems; and the policy
    that the guard hands its readings to."""

    def __init__(self, sup: FakeView) -> None:
        self.interface = Interface("wlan0", sup)
        self.policy = Policy(SETTINGS)
        self.problems = Problems()

    @property
    def iface_path(self) -> str | None:
        return self.interface.path

    async def iface(self) -> str:
        return await self.interface()


async def poll(owner: Owner, r: Roaming) -> None:
    """What Guard.kick does with the signal: read it while the policy wants a reading, and hand
    it over."""
    if owner.policy.signal_poll_due(roaming.time.monotonic()) and (signal := await r.poll()):
        owner.policy.observe_signal(roaming.time.monotonic(), signal.rssi)


@pytest.fixture
def clock(monkeypatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(roaming.time, "monotonic", lambda: now[0])
    return now


@pytest.fixture
def parts(clock) -> dict[str, Any]:
    sup = FakeView()
    owner = Owner(sup)
    return {"sup": sup, "owner": owner,
            "roaming": Roaming(owner.interface, sup, owner.problems, lambda: None)}


async def test_the_signal_is_read_only_while_the_policy_wants_a_reading(parts, clock):
    sup, owner, r = parts["sup"], parts["owner"], parts["roaming"]
    await poll(owner, r)
    assert sup.polls == 0  # idle: the signal does not matter
    owner.policy.set_held(True)
    await poll(owner, r)
    assert sup.polls == 1 and owner.policy.signal == -50
    await poll(owner, r)
    assert sup.polls == 1  # not due again before signal_poll_interval
    clock[0] += SETTINGS.signal_poll_interval
    await poll(owner, r)
    assert sup.polls == 2


async def test_below_the_floor_the_guard_should_release_for_roaming_until_it_is_back(parts,
                                                                                   clock):
    sup, owner, r = parts["sup"], parts["owner"], parts["roaming"]
    owner.policy.set_held(True)
    readings = [(-50, False), (-80, True), (-72, True), (-60, False)]  # floor -75, hysteresis 5
    for rssi, release in readings:
        sup.rssi = rssi
        clock[0] += SETTINGS.signal_poll_interval
        await poll(owner, r)
        assert (owner.policy.state == P.WEAK) is release, rssi
    sup.rssi = -80
    clock[0] += SETTINGS.signal_poll_interval
    await poll(owner, r)
    assert owner.policy.state == P.WEAK and "bgscan left on so it can roam" in owner.policy.reason


async def test_a_refused_signal_poll_is_shown_and_read_as_unknown(parts):
    sup, owner, r = parts["sup"], parts["owner"], parts["roaming"]
    sup.signal_error = ACCESS_DENIED
    assert await r.signal_now() is None
    assert owner.problems.text().startswith(
        "wlan0: cannot read the signal, so a fading signal does not release bgscan for roaming: "
        "wpa_supplicant refused SignalPoll")
    sup.signal_error, sup.rssi = None, None  # a driver that cannot tell: normal, no problem
    assert await r.signal_now() is None and owner.problems.text() == ""


async def test_a_poll_of_an_object_found_gone_is_no_reading(parts, clock):
    """NetworkManager re-created the interface: the old object's failure is not the poll, so
    the new object is polled at the next sample, not a poll interval later."""
    sup, owner, r = parts["sup"], parts["owner"], parts["roaming"]
    owner.policy.set_held(True)
    await owner.iface()
    sup.signal_error = GONE
    await poll(owner, r)
    assert owner.iface_path is None and owner.policy.signal_poll_due(clock[0])
    sup.signal_error = None
    await poll(owner, r)
    assert owner.iface_path == IFACE0 and not owner.policy.signal_poll_due(clock[0])


async def test_at_most_one_roaming_scan_per_gap(parts, clock, caplog):
    sup, r = parts["sup"], parts["roaming"]
    caplog.set_level(logging.INFO, "scanguard")
    await r.ask_for_scan()
    assert sup.scans == [IFACE0] and len(r.own_scans) == 1
    assert "asked wpa_supplicant for a scan so that it can roam now" in caplog.text
    clock[0] += 10
    await r.ask_for_scan()
    assert sup.scans == [IFACE0] and len(r.own_scans) == 1
    assert "no scan of our own for roaming: the last was 10 s ago" in caplog.text
    for n in range(2, OWN_SCANS_KEPT + 3):
        clock[0] += ROAM_SCAN_GAP
        await r.ask_for_scan()
        assert len(sup.scans) == n
    assert len(r.own_scans) == OWN_SCANS_KEPT  # the newest, for diagnose


async def test_our_scan_is_ours_until_an_end_follows_its_start(parts):
    r = parts["roaming"]
    assert not r.is_ours()
    await r.ask_for_scan()
    assert r.is_ours()
    r.scanning_changed(False)  # an earlier scan's end, announced late: not ours
    assert r.is_ours()
    r.scanning_changed(True)  # ours starts
    assert r.is_ours()
    r.scanning_changed(False)  # ...and ends: the next scan is somebody else's
    assert not r.is_ours()
    r.scanning_changed(True)
    assert not r.is_ours()


async def test_an_end_never_seen_stops_sparing_scans_after_the_limit(parts, clock):
    r = parts["roaming"]
    await r.ask_for_scan()
    r.scanning_changed(True)
    clock[0] += OWN_SCAN_LIMIT - 1
    assert r.is_ours()
    clock[0] += 1
    assert not r.is_ours()


@pytest.mark.parametrize(("error", "ours"), [(SCAN_REFUSED, False), (NO_REPLY, True)])
async def test_a_refused_scan_is_not_ours_an_unanswered_one_may_be(parts, caplog, error, ours):
    sup, r = parts["sup"], parts["roaming"]
    sup.scan_error = error
    caplog.set_level(logging.INFO, "scanguard")
    await r.ask_for_scan()
    assert r.is_ours() is ours
    assert len(r.own_scans) == (1 if ours else 0)  # for diagnose: no scan of ours if refused
    assert "asked wpa_supplicant for a scan to roam, it did not start one" in caplog.text
    assert parts["owner"].problems.text() == ""  # nothing to retry: bgscan scans anyway


async def _ask(r: Roaming, kind: str) -> None:
    if kind == "full":
        await r.ask_for_scan()
    else:
        await r.own_scan(kind, [2412], "Café ☕".encode())


@pytest.mark.parametrize(("first", "second"), [("full", "targeted"), ("targeted", "targeted"),
                                               ("targeted", "full")])
async def test_a_refused_scan_leaves_our_running_scan_ours(parts, first, second):
    """wpa_supplicant rejects a Scan while a scan runs: when that one is ours, it stays ours
    (never aborted), and its end is still its end."""
    sup, r = parts["sup"], parts["roaming"]
    await _ask(r, first)
    r.scanning_changed(True)
    sup.scan_error = SCAN_REFUSED
    await _ask(r, second)
    assert len(sup.scans) == 2 and r.is_ours() and r.own_kind == first
    r.scanning_changed(False)
    assert not r.is_ours()


@pytest.mark.parametrize("second", ["full", "targeted"])
async def test_a_request_a_stop_cuts_short_leaves_our_running_scan_ours(parts, second):
    """A stop that lands while the interface is looked up asks for nothing: the record of a
    scan of ours still running is left as it was, not cleared."""
    sup, r = parts["sup"], parts["roaming"]
    await _ask(r, "targeted")
    r.scanning_changed(True)
    parts["owner"].interface.path = None
    lookup = sup.interface

    async def stopping_during(ifname):
        r.stopping = True
        return await lookup(ifname)

    sup.interface = stopping_during
    await _ask(r, second)
    assert len(sup.scans) == 1 and r.is_ours() and r.own_kind == "targeted"
    assert [o.kind for o in r.own] == ["targeted"]  # what was not asked for is not listed


async def test_a_refused_request_leaves_the_scans_kept_as_they_were(parts, clock):
    """The list of our scans for diagnose is full: a refused request neither lists itself nor
    pushes the oldest out."""
    sup, r = parts["sup"], parts["roaming"]
    for _ in range(OWN_SCANS_KEPT):
        clock[0] += 1
        await r.own_scan("targeted", [2412], "Café ☕".encode())
    kept = list(r.own)
    assert len(kept) == OWN_SCANS_KEPT
    sup.scan_error = SCAN_REFUSED
    assert not await r.own_scan("walk", [2437, 2462], "Café ☕".encode())
    assert list(r.own) == kept
    sup.scan_error = NO_REPLY  # no answer: it may have started, so it is listed
    assert await r.own_scan("walk", [2437], "Café ☕".encode())
    assert list(r.own) == kept[1:] + [r.own[-1]] and r.own[-1].kind == "walk"


async def test_a_wpa_supplicant_restart_ends_our_scan(parts):
    r = parts["roaming"]
    await r.ask_for_scan()
    r.supplicant_restarted()
    assert not r.is_ours()


@pytest.mark.parametrize(("error", "ours"), [(None, True), (NO_REPLY, True),
                                               (SCAN_REFUSED, False)])
async def test_a_restart_while_our_scan_request_is_on_its_way_leaves_its_answer_to_decide(
        parts, error, ours):
    """The bus hands a Scan to whoever owns wpa_supplicant's name when it arrives: a restart
    announced while ours is on its way may mean the new process started it.  An answer that
    it did (or none) keeps it ours; a refusal leaves nothing ours, not even the scan that ran
    before the restart."""
    sup, r = parts["sup"], parts["roaming"]
    await _ask(r, "targeted")
    r.scanning_changed(True)  # the old process's scan of ours
    asked = sup.scan

    async def restarted_on_the_way(*args):
        r.supplicant_restarted()
        sup.scan_error = error
        await asked(*args)

    sup.scan = restarted_on_the_way
    await _ask(r, "walk")
    assert r.is_ours() is ours and len(r.own_scans) == (2 if ours else 1)
    if ours:
        assert r.own_kind == "walk"
        r.scanning_changed(True)
        r.scanning_changed(False)
        assert not r.is_ours()


async def test_a_scan_asked_of_an_object_found_gone_looks_it_up_again(parts):
    sup, owner, r = parts["sup"], parts["owner"], parts["roaming"]
    await owner.iface()
    sup.scan_error = GONE
    await r.ask_for_scan()
    assert owner.iface_path is None and not r.is_ours()
