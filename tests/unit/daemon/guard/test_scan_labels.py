"""The daemon's side of `scanguardctl diagnose`: each scan the kernel announces on a guarded
interface is labelled by who asked (attribution.py) and counted in Devices (scans_by_source,
last_scan), and `scanguardctl monitor` prints the label.  A Guard with the fakes of test_guard;
the kernel's events are fed by hand (this host has no cfg80211)."""

from __future__ import annotations

import time

import pytest

from nm_scanguard import attribution as A
from nm_scanguard.cli.show import _new_scans
from nm_scanguard.config import Settings
from nm_scanguard.daemon.daemon import Daemon
from nm_scanguard.daemon.guard.guard import Guard
from nm_scanguard.peers.nl80211 import ScanEvent
from nm_scanguard.daemon.service import Supervisor
from nm_scanguard.status import FIELDS
from tests.unit.daemon.guard import test_guard as G

parts, guard = G.parts, G.guard  # the fixtures of test_guard
CAFE = "Café ☕".encode()


class GeoClue:
    def __init__(self, pid: int | None) -> None:
        self.pid, self.asked = pid, 0

    async def __call__(self) -> int | None:
        self.asked += 1
        return self.pid


async def test_bgscan_a_client_and_geoclue_are_told_apart(guard: Guard, parts):
    geoclue = GeoClue(812)
    now = time.time()
    await guard.scans.scan_started((CAFE,), now, [], geoclue)
    assert guard.scans.scans_by_source == {A.BGSCAN: 1} and "bgscan" in guard.scans.last_scan
    assert geoclue.asked == 0  # only a direct caller's signature asks the bus about GeoClue
    seen = [A.Request(at=now - 0.3, program="nmcli", pid=4242, user="Café ☕")]
    await guard.scans.scan_started((b"",), now, seen, geoclue)
    assert guard.scans.last_scan == "nmcli through NetworkManager"
    await guard.scans.scan_started((CAFE, b""), now, [], geoclue)
    assert guard.scans.last_scan == "GeoClue, calling wpa_supplicant directly" and geoclue.asked == 1
    await guard.scans.scan_started((), now, [], geoclue)
    assert guard.scans.scans_by_source == {A.BGSCAN: 1, A.NETWORKMANAGER: 1, A.DIRECT: 1, A.UNKNOWN: 1}
    assert parts["sup"].ssid_reads == 1  # read once per interface object
    st = guard.status()
    assert st.scans_by_source == guard.scans.scans_by_source and st.last_scan == "unknown"
    wire = st.as_dbus()
    assert wire["scans_by_source"].signature == "a{su}" and wire["last_scan"].signature == "s"
    assert FIELDS["scans_by_source"] == "a{su}" and FIELDS["own_scans"] == "ad"


async def test_our_roaming_scan_is_labelled_ours(guard: Guard, parts):
    await guard.roaming.ask_for_scan()
    assert len(guard.roaming.own_scans) == 1 and abs(guard.roaming.own_scans[0] - time.time()) < 1
    await guard.scans.scan_started((b"",), time.time(), [], GeoClue(None))
    assert guard.scans.scans_by_source == {A.GUARD: 1} and guard.scans.last_scan == "nm-scanguard's own roaming scan"
    assert guard.status().own_scans == list(guard.roaming.own_scans)


@pytest.mark.parametrize("ssid", [b"Lab", CAFE])
async def test_a_scan_after_our_refused_request_is_not_labelled_ours(guard: Guard, parts, ssid):
    """wpa_supplicant refused our Scan (one of its own runs): the wildcard scan a program asks
    NetworkManager for a second later is that program's, and the status lists no scan of ours."""
    parts["sup"].scan_error = "fi.w1.wpa_supplicant1.Interface.ScanError"
    await guard.roaming.own_scan("targeted", [2412], ssid)
    await guard.roaming.ask_for_scan()
    assert guard.roaming.own_scans == [] and guard.status().own_scan_details == []
    now = time.time()
    seen = [A.Request(at=now - 0.3, program="Café ☕", pid=4242, user="alice")]
    await guard.scans.scan_started((b"",), now + 1.0, seen, GeoClue(None))
    assert guard.scans.scans_by_source == {A.NETWORKMANAGER: 1}
    assert guard.scans.last_scan == "Café ☕ through NetworkManager"


async def test_an_ssid_that_cannot_be_read_leaves_a_single_ssid_scan_unknown(guard: Guard, parts):
    parts["sup"].ssid_error = "org.freedesktop.DBus.Error.AccessDenied"
    await guard.scans.scan_started((CAFE,), time.time(), [], GeoClue(None))
    assert guard.scans.scans_by_source == {A.UNKNOWN: 1}  # no evidence that it was bgscan's
    assert guard.problems.text() == ""  # labels are a report, not a failure of the guard


async def test_the_daemon_hands_each_start_to_its_interfaces_guard(guard: Guard, tmp_path, monkeypatch):
    daemon = Daemon(Settings(), None, str(tmp_path / "state"), tasks=Supervisor())
    monkeypatch.setattr("nm_scanguard.daemon.guard.who_asked.LABEL_AFTER", 0.0)
    guard.ifname = "lo"  # an interface this host has, index 1
    daemon.guards["lo"] = guard
    spawned = []
    who_asked = daemon.who_asked
    monkeypatch.setattr(who_asked, "_spawn", lambda coro, g=None: spawned.append((coro, g)))
    who_asked._scan_event(ScanEvent("started", ifindex=999, ssids=(CAFE,)), 0.0, time.time())
    who_asked._scan_event(ScanEvent("finished", ifindex=1), 0.0, time.time())
    assert spawned == []  # another interface, and an end: nothing to label
    who_asked._scan_event(ScanEvent("started", ifindex=1, ssids=(CAFE,)), 0.0, time.time())
    (coro, g), = spawned
    assert g is guard
    monkeypatch.setattr(who_asked, "_geoclue_pid", GeoClue(None))
    await coro
    assert guard.scans.scans_by_source == {A.BGSCAN: 1}


@pytest.mark.parametrize("name", ["nmcli", "Café ☕"])
def test_monitor_prints_the_label_of_each_new_scan(name):
    before = {"scans_by_source": {"bgscan": 2}}
    one = {"scans_by_source": {"bgscan": 2, "networkmanager": 1},
           "last_scan": f"{name} through NetworkManager"}
    assert _new_scans(one, before) == [f"a scan by {name} through NetworkManager"]
    two = {"scans_by_source": {"bgscan": 3, "direct": 1}, "last_scan": "x"}
    assert _new_scans(two, one) == [
        f"1 scan(s) by {A.DESCRIPTIONS['bgscan']}", f"1 scan(s) by {A.DESCRIPTIONS['direct']}"]
    assert _new_scans(one, {}) == []  # the first entry: nothing is new


async def test_the_daemon_labels_scans_without_naming_a_users_program(tmp_path, monkeypatch):
    """Devices, where a scan's label is published, reads the same for every local user: the
    requests a label is made from carry only their time (GetRecentScanRequests names a
    caller's own)."""
    import asyncio
    import time

    from nm_scanguard.attribution import Request
    from nm_scanguard.config import Settings
    from nm_scanguard.daemon.daemon import Daemon
    from nm_scanguard.peers.nl80211 import ScanEvent

    class Tasks:
        def spawn(self, coro, report=None):
            return asyncio.ensure_future(coro)

        async def cancel_all(self):
            pass

    seen = []

    class FakeScans:
        async def scan_started(self, ssids, wall, requests, geoclue_pid):
            seen.extend(requests)

    class FakeGuard:
        scans = FakeScans()

    async def no_wait(_seconds):
        pass

    d = Daemon(Settings(), None, str(tmp_path), tasks=Tasks())
    d.who_asked.scan_request_seen(
        Request(at=time.time(), program="Café ☕", pid=4242, user="alice"), False, "alice")
    monkeypatch.setattr("nm_scanguard.daemon.guard.who_asked.asyncio.sleep", no_wait)
    event = ScanEvent(kind="started", ifindex=3)
    await d.who_asked._label_scan(FakeGuard(), event, time.time())  # type: ignore[arg-type]
    assert len(seen) == 1
    assert (seen[0].program, seen[0].pid, seen[0].user) == ("", 0, "")
    d.counters.close()
