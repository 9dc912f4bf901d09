"""Failures that show (issue 21): what NetworkManager or wpa_supplicant refuses is told, with what
to do, and never read as "no settings" or "no signal".  The peers' replies are faked at the
call (nm.call, nm.get_all, supplicant.call); the Daemon is used without a bus."""

from __future__ import annotations

import asyncio
import logging
import os
import pwd

import pytest

from nm_scanguard.peers import nm as NM, supplicant as S
from nm_scanguard.peers.bus import BusError
from nm_scanguard.config import Settings
from nm_scanguard.daemon.daemon import Daemon
from nm_scanguard.daemon.service import Supervisor
from nm_scanguard.daemon.guard.problems import MAX_TRACEBACKS
from nm_scanguard.peers.nm import NetworkManager, WifiDevice
from nm_scanguard.peers.supplicant import Supplicant, SupplicantError, UncertainOutcome

CAFE = "Café ☕"
UUID = "5f1c3a52-6c1e-4c55-9b0e-0a4a2d1e9c11"
DEV = "/org/freedesktop/NetworkManager/Devices/3"
ACTIVE = "/org/freedesktop/NetworkManager/ActiveConnection/7"
PROFILE = "/org/freedesktop/NetworkManager/Settings/4"
IFACE = "/fi/w1/wpa_supplicant1/Interfaces/0"
PERMISSION_DENIED = "org.freedesktop.NetworkManager.Settings.PermissionDenied"
ACCESS_DENIED = "org.freedesktop.DBus.Error.AccessDenied"
ME = pwd.getpwuid(os.geteuid()).pw_name


# ---- NetworkManager: a profile we may not read -------------------------------------------------

@pytest.fixture
def nm_replies(monkeypatch):
    """NetworkManager's answers: a Wi-Fi device activated with profile 'Café ☕'; set
    `replies["GetSettings"]` to a BusError to make GetSettings fail."""
    replies: dict[str, object] = {
        "GetSettings": {"connection": {"id": CAFE, "uuid": UUID},
                        "user": {"data": {"scanguard.enabled": "no"}}},
    }

    async def get_all(bus, dest, path, iface):
        if path == DEV:
            return {"DeviceType": NM.DEVICE_TYPE_WIFI, "Interface": "wlan0",
                    "State": NM.STATE_ACTIVATED, "ActiveConnection": ACTIVE}
        if path == ACTIVE:
            if isinstance(replies.get("Active"), BusError):
                raise replies["Active"]
            return {"Id": CAFE, "Uuid": UUID, "Connection": PROFILE}
        raise AssertionError(path)

    async def call(bus, dest, path, iface, member, *args, **kwargs):
        assert (path, member) == (PROFILE, "GetSettings")
        reply = replies["GetSettings"]
        if isinstance(reply, BusError):
            raise reply
        return [reply]

    monkeypatch.setattr(NM, "get_all", get_all)
    monkeypatch.setattr(NM, "call", call)
    return replies


async def test_a_readable_profile_gives_its_settings(nm_replies):
    dev = await NetworkManager(None).wifi_device(DEV)
    assert dev.settings_error is None and dev.connection_id == CAFE
    assert dev.user_data == {"scanguard.enabled": "no"}


async def test_a_private_profile_is_named_with_what_to_do(nm_replies):
    nm_replies["GetSettings"] = BusError(PERMISSION_DENIED, "uid 998 has no permission to "
                                                            "perform this operation")
    dev = await NetworkManager(None).wifi_device(DEV)
    # Not "no settings": unknown settings, said so, with the profile's name from the active
    # connection (readable when the profile is not).
    assert dev.user_data == {} and dev.connection_id == CAFE and dev.connection_uuid == UUID
    assert dev.connection_path == PROFILE
    assert dev.settings_error == (
        f"wlan0: profile '{CAFE}' is private to a user (connection.permissions): not guarded, "
        f"as its scanguard.* settings cannot be read; to guard it: nmcli connection modify "
        f"{UUID} +connection.permissions user:{ME}")
    assert len(dev.settings_error) < 256  # the status keeps it whole


@pytest.mark.parametrize("name, words", [
    ("org.freedesktop.DBus.Error.UnknownMethod", "went away while it was read"),
    ("org.freedesktop.DBus.Error.Timeout", "(enabled = no among them) are unknown"),
    ("org.freedesktop.DBus.Error.AccessDenied", "(enabled = no among them) are unknown"),
])
async def test_any_other_failure_to_read_the_profile_shows_too(nm_replies, name, words):
    nm_replies["GetSettings"] = BusError(name, "")
    dev = await NetworkManager(None).wifi_device(DEV)
    assert dev.user_data == {} and words in dev.settings_error and name in dev.settings_error


async def test_an_active_connection_that_went_away_is_not_guarded_with_no_settings(nm_replies):
    nm_replies["Active"] = BusError("org.freedesktop.DBus.Error.UnknownObject", "")
    dev = await NetworkManager(None).wifi_device(DEV)
    assert dev.activated and "went away" in dev.settings_error and "its profile" in dev.settings_error


def test_an_unreadable_profile_is_not_guarded(tmp_path):
    """The decision: its settings may say enabled = no, and a person who turned the guard off
    for a network must not find it on there; bgscan stays as NetworkManager set it."""
    daemon = Daemon(Settings(threshold_mbit=5.0), None, str(tmp_path), tasks=Supervisor())
    readable = WifiDevice(DEV, "wlan0", NM.STATE_ACTIVATED, PROFILE, CAFE, UUID,
                          {"scanguard.threshold_mbit": "2"})
    assert daemon.settings_for(readable).enabled
    assert daemon.settings_for(readable).threshold_mbit == 2.0
    private = WifiDevice(DEV, "wlan0", NM.STATE_ACTIVATED, PROFILE, CAFE, UUID,
                         settings_error="wlan0: profile 'Café ☕' is private to a user")
    settings = daemon.settings_for(private)
    assert not settings.enabled and settings.threshold_mbit == 5.0
    assert settings.source("enabled") == f"unreadable profile {CAFE}"


# ---- wpa_supplicant: SignalPoll --------------------------------------------------------------------

@pytest.fixture
def signal_poll(monkeypatch):
    reply: dict[str, object] = {}

    async def call(bus, dest, path, iface, member, *args, **kwargs):
        assert member == "SignalPoll"
        if isinstance(reply.get("error"), BusError):
            raise reply["error"]
        return [reply["info"]]

    monkeypatch.setattr(S, "call", call)
    return reply


async def test_signal_reads_rssi(signal_poll):
    signal_poll["info"] = {"rssi": -61, "linkspeed": 433}
    assert await Supplicant(None).signal(IFACE) == -61


async def test_signal_unknown_to_the_driver_is_none(signal_poll):
    # What wpa_supplicant 2.10 answers when not associated (tests/contract).
    signal_poll["error"] = BusError("org.freedesktop.DBus.Error.Failed", "Failed to read signal")
    assert await Supplicant(None).signal(IFACE) is None
    signal_poll.pop("error")
    signal_poll["info"] = {"linkspeed": 433}  # an answer without rssi: cannot tell either
    assert await Supplicant(None).signal(IFACE) is None


async def test_a_refused_signal_poll_is_an_error_that_says_what_to_do(signal_poll):
    signal_poll["error"] = BusError(ACCESS_DENIED, "Rejected send message")
    with pytest.raises(SupplicantError) as e:
        await Supplicant(None).signal(IFACE)
    assert "refused SignalPoll" in str(e.value) and "group 'netdev'" in str(e.value)
    assert e.value.bus_error == ACCESS_DENIED


async def test_an_unanswered_signal_poll_is_an_error(signal_poll):
    signal_poll["error"] = BusError("org.freedesktop.DBus.Error.NoReply", "")
    with pytest.raises(UncertainOutcome):
        await Supplicant(None).signal(IFACE)


# ---- an unexpected error in a task of the daemon's ---------------------------------------------

def _tracebacks(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info]


async def test_a_task_failing_the_same_way_logs_its_traceback_once(tmp_path, caplog):
    daemon = Daemon(Settings(), None, str(tmp_path), tasks=Supervisor())
    calls = {"n": 0}

    async def broken_sync(text: str) -> None:
        calls["n"] += 1
        raise KeyError(text)

    caplog.set_level(logging.INFO, "scanguard")
    for _ in range(3):
        await daemon.spawn(broken_sync("a"))
    assert calls["n"] == 3 and len(_tracebacks(caplog)) == 1
    assert "unexpected error in broken_sync: KeyError: 'a'" in caplog.text
    await daemon.spawn(broken_sync("b"))  # another error: its own traceback
    await daemon.spawn(broken_sync("a"))  # back to the first: one line, no traceback
    assert len(_tracebacks(caplog)) == 2
    lines = [r.getMessage() for r in caplog.records if "KeyError: 'a'" in r.getMessage()]
    assert len(lines) == 2


async def test_distinct_tracebacks_are_bounded(tmp_path, caplog):
    daemon = Daemon(Settings(), None, str(tmp_path), tasks=Supervisor())

    async def broken(n: int) -> None:
        raise ValueError(n)

    caplog.set_level(logging.INFO, "scanguard")
    for n in range(MAX_TRACEBACKS + 5):
        await daemon.spawn(broken(n))
    assert len(_tracebacks(caplog)) == MAX_TRACEBACKS
    assert "ValueError: 20" in caplog.text  # still told, in one line


async def test_cancellation_is_not_an_error(tmp_path, caplog):
    daemon = Daemon(Settings(), None, str(tmp_path), tasks=Supervisor())
    task = daemon.spawn(asyncio.sleep(10))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not caplog.records


async def test_the_supervisor_cancels_every_task_it_runs_on_stop(caplog):
    tasks = Supervisor()
    running = [tasks.spawn(asyncio.sleep(3600)) for _ in range(3)]
    await asyncio.sleep(0)
    await tasks.cancel_all()
    assert all(t.cancelled() for t in running) and not caplog.records
    await tasks.cancel_all()  # nothing left: a second stop is harmless
