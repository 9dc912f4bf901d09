"""`enabled = no` in the settings file, the administrator's off switch: the daemon keeps running
(bus activation would only start it again) but does nothing.  Every connection is disabled
whatever its profile says, a guard gives back what it suspended and then refuses, aborts and
suspends nothing, and the status says it is off and why.  The Daemon without a bus
(settings_for, the STATUS= line) and a Guard on fakes (tests/unit/daemon/guard/test_guard.py)."""

from __future__ import annotations

import logging

import pytest

from nm_scanguard.config import load_file
from nm_scanguard.daemon.guard import policy as P
from nm_scanguard.daemon.daemon import Daemon
from nm_scanguard.daemon.off import status_line
from nm_scanguard.daemon.service import Supervisor
from nm_scanguard.peers.nm import WifiDevice
from tests.unit.daemon.guard.test_guard import SETTINGS, guard, parts, run  # noqa: F401 (fixtures)
from tests.unit.daemon.bgscan.test_suspension import NET0, NM_BGSCAN

NAMES = ["scanguard", "Café ☕"]


def daemon_with(tmp_path, name: str, text: str) -> tuple[Daemon, str]:
    conf = tmp_path / f"{name}.conf"
    conf.write_text(f"[scanguard]\n{text}", encoding="utf-8")
    return Daemon(load_file(str(conf), required=True), str(conf), str(tmp_path),
                  tasks=Supervisor()), str(conf)


def device(user_data: dict[str, str]) -> WifiDevice:
    return WifiDevice(path="/org/freedesktop/NetworkManager/Devices/1", ifname="wlan0", state=100,
                      connection_id="Home ☕", connection_uuid="u-1", user_data=user_data)


@pytest.mark.parametrize("name", NAMES)
def test_the_files_no_turns_every_connection_off_and_no_profile_turns_it_back_on(tmp_path, name):
    daemon, conf = daemon_with(tmp_path, name, "enabled = no\nthreshold_mbit = 7\n")
    assert P.off_reason(daemon.settings) == f"enabled = no in {conf}"
    for user_data in ({}, {"scanguard.enabled": "yes"}, {"scanguard.threshold_mbit": "2"}):
        settings = daemon.settings_for(device(user_data))
        assert not settings.enabled and settings.source("enabled") == conf
        policy = P.Policy(settings)
        policy.set_held(True)
        assert policy.state == P.DISABLED and not policy.want_engaged
        assert policy.reason == f"nm-scanguard is off: enabled = no in {conf}"
    assert status_line(daemon.settings, daemon.guards.status_line) == \
        f"nm-scanguard is off: enabled = no in {conf}"


@pytest.mark.parametrize("name", NAMES)
def test_a_profiles_no_leaves_that_network_alone_and_the_service_on(tmp_path, name):
    daemon, _ = daemon_with(tmp_path, name, "threshold_mbit = 7\n")
    assert P.off_reason(daemon.settings) == ""
    settings = daemon.settings_for(device({"scanguard.enabled": "no"}))
    assert not settings.enabled and P.Policy(settings).reason == "enabled = no in profile Home ☕"
    assert daemon.settings_for(device({})).enabled
    assert status_line(daemon.settings, daemon.guards.status_line) == \
        "no Wi-Fi connection to guard"


@pytest.mark.parametrize("name", NAMES)
async def test_a_reload_says_when_it_turns_off_and_on_again(tmp_path, name, caplog):
    daemon, conf = daemon_with(tmp_path, name, "threshold_mbit = 7\n")
    daemon.sync = _no_sync  # type: ignore[method-assign]  # no bus: nothing to follow
    with caplog.at_level(logging.INFO, logger="scanguard"):
        (tmp_path / f"{name}.conf").write_text("[scanguard]\nenabled = no\n", encoding="utf-8")
        await daemon.reload()
        assert P.off_reason(daemon.settings) == f"enabled = no in {conf}"
        await daemon.reload()  # still off: said once
        (tmp_path / f"{name}.conf").write_text("[scanguard]\nenabled = yes\n", encoding="utf-8")
        await daemon.reload()
    said = [r.getMessage() for r in caplog.records if "nm-scanguard is" in r.getMessage()]
    assert said == [f"nm-scanguard is off: enabled = no in {conf}; it gives back every bgscan "
                    "it suspended, refuses and aborts no scan and grants no hold until that "
                    "says yes and it is reloaded",
                    "nm-scanguard is on again: the settings file no longer says enabled = no"]
    assert P.off_reason(daemon.settings) == ""


async def _no_sync() -> None:
    pass


async def test_a_guard_turned_off_gives_bgscan_back_then_suspends_refuses_and_aborts_nothing(
        guard, parts):  # noqa: F811 (the fixtures)
    """What a reload to `enabled = no` does to a guard that holds bgscan off for a busy, held
    link (Daemon.sync: guard.update with Daemon.settings_for, then reconcile)."""
    sup, counters, listener = parts["sup"], parts["counters"], parts["listener"]
    guard.hold_changed(True)
    await guard.step()
    await run(guard, counters, 8, 3)
    assert guard.engaged and sup.networks[NET0]["bgscan"] == ""
    assert guard.scans.deferring

    off = SETTINGS.with_values({"enabled": False}, "/etc/scanguard/Café ☕.conf")
    guard.update(guard.dev, off)
    assert await guard.kick()
    assert not guard.engaged and sup.networks[NET0]["bgscan"] == NM_BGSCAN
    assert parts["journal"].entries() == {}
    assert guard.state == P.DISABLED
    assert guard.reason == "nm-scanguard is off: enabled = no in /etc/scanguard/Café ☕.conf"

    sets = len(sup.sets())
    listener.beside.clear()
    guard.scans.scanning_changed(True)  # a scan starts: not aborted
    await run(guard, counters, 50, 5)  # busy and held: not suspended
    assert len(sup.sets()) == sets and sup.networks[NET0]["bgscan"] == NM_BGSCAN
    assert listener.beside == [] and not guard.scans.deferring
    assert guard.status().state == "disabled"
