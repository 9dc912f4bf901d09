"""Failures that show (issue 21), with scanguardd as a process on a private bus: a profile
NetworkManager will not give us (PermissionDenied, as for a profile private to a user) and a
SignalPoll wpa_supplicant refuses (AccessDenied) appear in the Devices property, in
`scanguardctl status` and once in the log, and the daemon does what it says."""

from __future__ import annotations

import asyncio
import os
import pwd
import re
import shutil
import subprocess
import sys

import pytest

from nm_scanguard.peers.supplicant import Supplicant
from tests.api.harness import props, scanguardctl
from tests.conftest import call_failed
from tests.peers import CONN_IFACE, REPO, DaemonProcess, env_for

from .conftest import eventually

CAFE = "Café ☕"
ORIGINAL = "simple:30:-70:86400"
ACCESS_DENIED = "org.freedesktop.DBus.Error.AccessDenied"
CONF = """[scanguard]
threshold_pps = 0
engage_after = 2
release_after = 1
sample_interval = 0.2
signal_poll_interval = 0.5
"""
# What NetworkManager answers another non-root user for a profile whose connection.permissions
# do not name it (nm-settings-connection.c, nm_auth_is_subject_in_acl_set_error).
DENY_SETTINGS = ("raise dbus.exceptions.DBusException('uid 998 has no permission to perform this "
                 "operation', name='org.freedesktop.NetworkManager.Settings.PermissionDenied')")
GIVE_SETTINGS = "ret = self.ConnectionGetSettings(self)"  # the template's own GetSettings


@pytest.fixture
def daemon_process(system_bus, tmp_path, request):
    started = []

    def start() -> DaemonProcess:
        started.append(DaemonProcess(system_bus.address, tmp_path, CONF).start())
        return started[-1]

    yield start
    for p in started:
        p.stop()
        if call_failed(request):
            print(f"---- daemon log ----\n{p.log()}")


async def device(bus, ifname: str) -> dict:
    for d in (await props(bus))["Devices"]:
        if d["interface"] == ifname:
            return d
    return {}


async def bgscan(bus, net) -> str | None:
    return await Supplicant(bus).get_bgscan(net)


async def bgscan_is(bus, net, value: str) -> bool:
    return await bgscan(bus, net) == value


def settings_reads(peers) -> int:
    return len(peers.nm.mock_object(peers.conn).GetMethodCalls("GetSettings"))


def set_get_settings(peers, code: str) -> None:
    """Replace the profile's GetSettings, then let NetworkManager say the profile changed."""
    obj = peers.nm.mock_object(peers.conn)
    obj.AddMethod(CONN_IFACE, "GetSettings", "", "a{sa{sv}}", code)
    obj.EmitSignal(CONN_IFACE, "Updated", "", peers.nm._dbus.Array([], signature="v"))


async def test_a_private_profile_is_not_guarded_and_says_what_to_do(bus, link, peers,
                                                                   daemon_process,
                                                                   system_bus):
    await peers.setup(activate=False)
    peers.nm.rename_profile(peers.conn, CAFE)
    set_get_settings(peers, DENY_SETTINGS)
    await peers.activate()
    p = daemon_process()
    await p.wait_ready(bus)
    link.send(mbit=8)

    async def disabled():  # the guard's first reconcile publishes its state
        return (await device(bus, link.ifname)).get("state") == "disabled"

    await eventually(disabled, what="device disabled in Devices")
    d = await device(bus, link.ifname)
    me = pwd.getpwuid(os.geteuid()).pw_name
    expected = (f"{link.ifname}: profile '{CAFE}' is private to a user (connection.permissions): "
                "not guarded, as its scanguard.* settings cannot be read; to guard it: nmcli "
                "connection modify")
    assert d["error"].startswith(expected) and d["error"].endswith(
        f"+connection.permissions user:{me}"), d
    assert d["state"] == "disabled" and d["connection_id"] == CAFE
    assert d["settings"]["enabled"] is False
    assert d["settings_sources"]["enabled"] == f"unreadable profile {CAFE}"
    status = await asyncio.get_running_loop().run_in_executor(
        None, lambda: scanguardctl(system_bus.address, "status"))
    assert f"problem: {expected}" in status.stdout, status
    # Busy for 2 s (engage_after is 2 samples of 0.2 s): left alone.
    await asyncio.sleep(2.0)
    assert await bgscan(bus, peers.net) == ORIGINAL and await peers.sets() == []
    # NetworkManager signals again; the read fails again: nothing new to log.
    reads = settings_reads(peers)
    set_get_settings(peers, DENY_SETTINGS)
    await eventually(lambda: settings_reads(peers) > reads, what="profile read again")
    await asyncio.sleep(0.5)
    assert p.log().count("is private to a user") == 1, p.log()

    # The profile becomes readable (e.g. +connection.permissions user:scanguard): guarded.
    set_get_settings(peers, GIVE_SETTINGS)
    await eventually(lambda: bgscan_is(bus, peers.net, ""), what="guarded once readable")

    async def guarding():
        return (await device(bus, link.ifname)).get("state") == "guarding"

    await eventually(guarding, what="state guarding")
    assert (await device(bus, link.ifname))["error"] == ""
    assert "the settings of profile Café ☕ can be read again" in p.log()


async def test_a_refused_signal_poll_shows_and_guarding_goes_on(bus, link, peers, daemon_process):
    await peers.setup()
    p = daemon_process()
    await p.wait_ready(bus)
    link.send(mbit=8)
    await eventually(lambda: bgscan_is(bus, peers.net, ""), what="engaged")
    polls = peers.wpa.mock_object(peers.iface)
    await peers.wpa_mock("SetSignalPollError", "os", [peers.iface, ACCESS_DENIED])
    await peers.wpa_mock("SetSignal", "oi", [peers.iface, -80])  # fading, and nobody can tell

    async def error_shown():
        return "cannot read the signal" in (await device(bus, link.ifname)).get("error", "")

    await eventually(error_shown, what="SignalPoll refusal in Devices")
    d = await device(bus, link.ifname)
    assert d["error"].startswith(f"{link.ifname}: cannot read the signal, so a fading signal does "
                                 "not release bgscan for roaming: wpa_supplicant refused SignalPoll")
    assert "group 'netdev'" in d["error"] and d["state"] == "guarding"
    calls = len(polls.GetMethodCalls("SignalPoll"))
    await eventually(lambda: len(polls.GetMethodCalls("SignalPoll")) >= calls + 3,
                     what="three more polls")
    assert await bgscan(bus, peers.net) == ""  # still guarding
    assert p.log().count("cannot read the signal") == 1, p.log()

    # Allowed again: the error goes and the weak signal releases bgscan for roaming.
    await peers.wpa_mock("SetSignalPollError", "os", [peers.iface, ""])
    await eventually(lambda: bgscan_is(bus, peers.net, ORIGINAL), what="released on weak signal")

    async def weak():  # published after the scan it asks for, a moment after the restore
        return (await device(bus, link.ifname)).get("state") == "released-weak-signal"

    await eventually(weak, what="state released-weak-signal")
    assert (await device(bus, link.ifname))["error"] == ""


async def test_a_signal_the_driver_cannot_read_is_no_problem(bus, link, peers, daemon_process):
    await peers.setup()
    p = daemon_process()
    await p.wait_ready(bus)
    link.send(mbit=8)
    await eventually(lambda: bgscan_is(bus, peers.net, ""), what="engaged")
    polls = peers.wpa.mock_object(peers.iface)
    await peers.wpa_mock("SetSignalPollFails", "ob", [peers.iface, True])  # "Failed to read signal"
    calls = len(polls.GetMethodCalls("SignalPoll"))
    await eventually(lambda: len(polls.GetMethodCalls("SignalPoll")) >= calls + 3,
                     what="three more polls")
    d = await device(bus, link.ifname)
    assert d["error"] == "" and d["state"] == "guarding"
    assert "cannot read the signal" not in p.log(), p.log()


class ReadOnlyStateDaemon(DaemonProcess):
    """scanguardd with a state directory it cannot write.  Run as root, it runs without the
    capabilities that override file modes (CAP_DAC_OVERRIDE and friends), as a read-only
    directory would refuse root too."""

    def start(self) -> ReadOnlyStateDaemon:
        self.state_dir.mkdir()
        self.state_dir.chmod(0o555)
        drop = []
        if os.geteuid() == 0:
            drop = [shutil.which("setpriv") or "setpriv",
                    "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [*drop, sys.executable, "-m", "nm_scanguard", "-v", "-c", str(self.config),
                 "--state-dir", str(self.state_dir)],
                stdout=log, stderr=subprocess.STDOUT, env=env_for(self.address), cwd=REPO)
        return self


async def test_a_state_directory_it_cannot_write_is_an_error_not_guarding(bus, link, peers,
                                                                        system_bus, tmp_path,
                                                                        request):
    """Issue 34: such a daemon said `guarding ... client scans deferred` (now "refused") while
    bgscan stayed on and nothing was refused.  The state is `error`, bgscan is untouched, no
    refusing is claimed, and the log says what happens to other programs' scans in plain words."""
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("root needs setpriv to meet a directory it cannot write")
    await peers.setup(activate=False)
    peers.nm.rename_profile(peers.conn, CAFE)
    await peers.activate()
    p = ReadOnlyStateDaemon(system_bus.address, tmp_path, CONF).start()
    try:
        await p.wait_ready(bus)
        link.send(mbit=8)

        async def error():
            return (await device(bus, link.ifname)).get("state") == "error"

        await eventually(error, what="state error in Devices")
        await asyncio.sleep(1.0)  # five more samples, each trying again
        state = p.state_dir
        d = await device(bus, link.ifname)
        assert re.fullmatch(r"traffic [0-9.]+ Mbit/s, [0-9]+ packets/s received and sent \(threshold 1 Mbit/s\); "
                            r"bgscan could not be suspended, see the problem", d["reason"]), d
        assert d["error"] == (
            f"{link.ifname}: cannot write {state}/suspended.json (Permission denied), so bgscan "
            "is left on (a crash could not restore it); check the directory's permissions; "
            f"{state}/defer-scans: cannot write (Permission denied), so other programs' Wi-Fi "
            "scan requests are not refused"), d
        assert d["deferring_scans"] is False and d["suspended_bgscan"] == ""
        assert await bgscan(bus, peers.net) == ORIGINAL and await peers.sets() == []
        status = await asyncio.get_running_loop().run_in_executor(
            None, lambda: scanguardctl(system_bus.address, "status"))
        assert status.returncode == 0 and f"{link.ifname} ('{CAFE}'): error for " in status.stdout
        assert "guarding" not in status.stdout and "client scans refused" not in status.stdout, status.stdout
        log = p.log()
        assert (f"{link.ifname}: connected to '{CAFE}'; will guard while busy (threshold "
                "1 Mbit/s)") in log
        assert (f"{state}/defer-scans: cannot write (Permission denied), so other programs' "
                "Wi-Fi scan requests are allowed, but scanguardctl diagnose cannot name who "
                "asked for them; check that the directory exists and belongs to the service "
                "user") in log
        assert log.count("so bgscan is left on") == 1, log
        assert f"{link.ifname}: guarding" not in log and "meanwhile" not in log, log

        # Writable again: guarding for real, with the reason following the traffic.
        state.chmod(0o755)
        await eventually(lambda: bgscan_is(bus, peers.net, ""), what="engaged once writable")
        d = await device(bus, link.ifname)
        assert d["state"] == "guarding" and d["error"] == "" and d["deferring_scans"] is True
        link.stop()
        link.send(mbit=3)

        async def new_figures():
            reason = (await device(bus, link.ifname)).get("reason", "")
            return re.match(r"traffic [23]\.[0-9] Mbit/s", reason) is not None

        await eventually(new_figures, what="the reason's figures follow the traffic")
        assert (await device(bus, link.ifname))["state"] == "guarding"
    finally:
        p.stop()
        p.state_dir.chmod(0o755)  # so that pytest can remove it, whatever failed
        if call_failed(request):
            print(f"---- daemon log ----\n{p.log()}")
