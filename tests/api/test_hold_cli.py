"""`scanguardctl hold -- COMMAND` as a user runs it: the command runs whether or not a hold could
be taken (unless --strict), hold's own failures exit 125, the command's status passes through,
and a hold lost to a restart of the service is taken again.

The service is the real daemon on a private bus (tests/api/conftest.py); a restart is
DaemonProcess stop and start, what `systemctl restart scanguard` (and every upgrade) does."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nm_scanguard.cli.hold import QUICK_EXIT
from nm_scanguard.peers.bus import call
from nm_scanguard.dbuslib import Message, MessageBus, MessageType
from nm_scanguard.names import DBUS
from tests.api.harness import BGSCAN, NAME, REPO, env_for, kill, named_holds, scanguardctl
from tests.conftest import assert_eventually

REASONS = ["backup", "Café ☕"]
NOT_RUNNING = "the scanguard service is not running"
BGSCAN_QUOTED = f'"{BGSCAN}"'


def started(address: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "nm_scanguard.cli.scanguardctl", *args],
                            env=env_for(address), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def waiting_for(flag: Path) -> list[str]:
    """A command that runs until the test creates `flag`, then exits 4."""
    return ["sh", "-c", 'while [ ! -e "$1" ]; do sleep 0.05; done; echo "done $2"; exit 4',
            "sh", str(flag), "Café ☕"]


async def holds(scenario) -> list[dict]:
    return await named_holds(scenario.bus)


@pytest.mark.parametrize("reason", REASONS)
async def test_without_the_service_the_command_still_runs_with_a_warning(system_bus, reason):
    r = await asyncio.to_thread(scanguardctl, system_bus.address, "hold", "--reason", reason,
                                "--", "sh", "-c", 'echo "ran $1"; exit 3', "sh", reason)
    assert r.returncode == 3, r.stderr
    assert r.stdout == f"ran {reason}\n"
    assert r.stderr.startswith("scanguardctl: warning: running sh without a hold, so Wi-Fi "
                               "background scans may run during it: " + NOT_RUNNING), r.stderr
    assert "--strict" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("reason", REASONS)
async def test_strict_does_not_run_the_command_and_exits_125(system_bus, reason):
    r = await asyncio.to_thread(scanguardctl, system_bus.address, "hold", "--strict",
                                "--reason", reason, "--", "sh", "-c", "echo ran")
    assert r.returncode == 125, r.stderr
    assert r.stdout == ""
    assert r.stderr.startswith("scanguardctl: no hold could be taken, so sh was not run "
                               "(--strict): " + NOT_RUNNING), r.stderr


async def test_holds_own_usage_errors_exit_125_and_a_missing_command_127(system_bus):
    r = await asyncio.to_thread(scanguardctl, system_bus.address, "hold")
    assert r.returncode == 125  # without a command, a hold is all there is to do
    assert r.stderr == f"scanguardctl: no hold could be taken: {NOT_RUNNING} and could not be " \
                       "started (org.freedesktop.DBus.Error.ServiceUnknown); see `systemctl " \
                       "status scanguard`\n", r.stderr
    assert r.stdout == ""
    r = await asyncio.to_thread(scanguardctl, system_bus.address, "hold", "--reason")
    assert r.returncode == 125 and "expected one argument" in r.stderr
    r = await asyncio.to_thread(scanguardctl, system_bus.address, "hold", "--Café", "--", "true")
    assert r.returncode == 125
    assert "scanguardctl hold: error: unrecognized arguments: --Café" in r.stderr
    r = await asyncio.to_thread(scanguardctl, system_bus.address, "hold", "--",
                                "/nonexistent/Café ☕")
    assert r.returncode == 127 and "/nonexistent/Café ☕: command not found" in r.stderr


@pytest.mark.parametrize("reason", REASONS)
async def test_the_hold_is_taken_again_when_the_service_restarts(scenario, tmp_path, reason):
    flag = tmp_path / "done"
    proc = started(scenario.address, "hold", "--reason", reason, "--", *waiting_for(flag))
    try:
        async def held_by_us():
            return [h["reason"] for h in await holds(scenario)] == [reason]
        await assert_eventually(held_by_us, message="the hold is listed")
        (before,) = await holds(scenario)

        scenario.daemon.stop()
        scenario.daemon.start()
        await scenario.daemon.wait_ready(scenario.bus)
        await assert_eventually(held_by_us, timeout=15, message="the hold is taken again")
        (after,) = await holds(scenario)
        assert after["application_id"] == "scanguardctl" and after["cookie"] != before["cookie"]
        await assert_eventually(lambda: scenario.bgscan() == '""', message="bgscan suspended")

        flag.touch()
        out, err = await asyncio.to_thread(proc.communicate, timeout=20)
        assert proc.returncode == 4, err
        assert out == "done Café ☕\n"
        assert "scanguardctl: warning: the scanguard service stopped" in err
        assert "scanguardctl: the scanguard service restarted; hold taken again\n" in err
        assert "Traceback" not in err
        assert await holds(scenario) == []  # released by the new instance at the end
    finally:
        kill(proc)


async def test_a_service_that_starts_later_is_held_too(scenario, tmp_path):
    scenario.daemon.stop()
    flag = tmp_path / "done"
    proc = started(scenario.address, "hold", "--reason", "Café ☕", "--", *waiting_for(flag))
    try:
        await asyncio.sleep(1)  # the command is running without a hold
        assert proc.poll() is None
        scenario.daemon.start()
        await scenario.daemon.wait_ready(scenario.bus)

        async def held():
            return [h["reason"] for h in await holds(scenario)] == ["Café ☕"]
        await assert_eventually(held, timeout=15, message="the hold is taken")
        flag.touch()
        out, err = await asyncio.to_thread(proc.communicate, timeout=20)
        assert proc.returncode == 4, err
        assert err.startswith("scanguardctl: warning: running sh without a hold"), err
        assert "scanguardctl: the scanguard service started; hold taken\n" in err
    finally:
        kill(proc)


async def test_a_hold_that_cannot_be_taken_again_is_a_warning_and_the_command_goes_on(
        scenario, tmp_path):
    flag = tmp_path / "done"
    proc = started(scenario.address, "hold", "--", *waiting_for(flag))
    impostor = await MessageBus(bus_address=scenario.address).connect()
    try:
        async def held():
            return len(await holds(scenario)) == 1
        await assert_eventually(held, message="the hold is listed")
        scenario.daemon.stop()
        # Something that is not the daemon takes the name and answers Hold with an error.
        await call(impostor, *DBUS, "RequestName", "su", [NAME, 4])
        await asyncio.sleep(1)
        assert proc.poll() is None, proc.stderr.read()
        flag.touch()
        out, err = await asyncio.to_thread(proc.communicate, timeout=20)
        assert proc.returncode == 4, err
        assert ("scanguardctl: warning: the scanguard service restarted, but the hold could not "
                "be taken again: ") in err, err
        assert "; sh keeps running without it\n" in err
    finally:
        impostor.disconnect()
        kill(proc)


@pytest.mark.parametrize("interface", ["wlan99", "Café☕"])
async def test_an_unknown_interface_is_explained_in_the_cli_s_own_terms(scenario, interface):
    r = await asyncio.to_thread(scanguardctl, scenario.address, "hold", "--strict",
                                "--interface", interface, "--", "true")
    assert r.returncode == 125
    assert f"NetworkManager knows no Wi-Fi interface '{interface}'" in r.stderr, r.stderr
    assert r.stderr.endswith("; omit --interface to hold every Wi-Fi interface\n"), r.stderr
    assert 'use ""' not in r.stderr


async def test_a_forged_name_owner_change_is_not_believed(scenario, tmp_path):
    """Any local user may send a signal to hold's connection: only the bus's own
    NameOwnerChanged says the service stopped or restarted."""
    flag = tmp_path / "done"
    proc = started(scenario.address, "hold", "--reason", "Café ☕", "--", *waiting_for(flag))
    forger = await MessageBus(bus_address=scenario.address).connect()
    try:
        async def held():
            return len(await holds(scenario)) == 1
        await assert_eventually(held, message="the hold is listed")
        (hold,) = await holds(scenario)
        (owner,) = await call(forger, *DBUS, "GetNameOwner", "s", [NAME])
        for old, new in ((owner, ""), ("", forger.unique_name)):
            sent = forger.send(Message(
                message_type=MessageType.SIGNAL, destination=hold["caller"],
                path="/org/freedesktop/DBus", interface="org.freedesktop.DBus",
                member="NameOwnerChanged", signature="sss", body=[NAME, old, new]))
            if asyncio.isfuture(sent):
                await sent
        await asyncio.sleep(1)
        assert [h["cookie"] for h in await holds(scenario)] == [hold["cookie"]]
        flag.touch()
        _, err = await asyncio.to_thread(proc.communicate, timeout=20)
        assert proc.returncode == 4, err
        assert "scanguard service" not in err, err  # neither "stopped" nor "restarted"
        assert await holds(scenario) == []  # released: hold still knew its giver
    finally:
        forger.disconnect()
        kill(proc)


# ---- a hold without a command, and one whose command returns at once ------------------------

@pytest.mark.parametrize("reason,sig", [("Café ☕", signal.SIGTERM), ("video call", signal.SIGINT)])
async def test_without_a_command_it_holds_until_a_signal_then_releases(scenario, reason, sig):
    proc = started(scenario.address, "hold", "--reason", reason)
    try:
        async def held():
            return [h["reason"] for h in await holds(scenario)] == [reason]
        await assert_eventually(held, message="the hold is listed")
        await assert_eventually(lambda: scenario.bgscan() == '""', message="bgscan suspended")
        line = await asyncio.to_thread(proc.stdout.readline)
        assert line == (f"holding ({reason}): Wi-Fi background scans stay suspended on every "
                        f"Wi-Fi interface until you press Ctrl-C or send SIGTERM (kill "
                        f"{proc.pid})\n")
        await asyncio.sleep(QUICK_EXIT + 0.5)  # it does not end by itself
        assert proc.poll() is None and scenario.bgscan() == '""'

        proc.send_signal(sig)
        out, err = await asyncio.to_thread(proc.communicate, timeout=20)
        assert proc.returncode == 0, err
        assert (out, err) == ("", "")
        assert await holds(scenario) == []
        await assert_eventually(lambda: scenario.bgscan() == BGSCAN_QUOTED,
                                message="bgscan restored")
    finally:
        kill(proc)


@pytest.mark.parametrize("reason", REASONS)
async def test_a_hold_whose_command_returns_at_once_says_so(scenario, reason):
    """`firefox URL` with Firefox open hands the URL over and exits: the hold ends with it,
    which the user must learn, with what to do instead."""
    r = await asyncio.to_thread(scanguardctl, scenario.address, "hold", "--reason", reason,
                                "--", "sh", "-c", 'echo "handed over $1"', "sh", reason)
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"handed over {reason}\n"
    assert re.fullmatch(
        r"scanguardctl: warning: the hold ended after \d+\.\d s, when sh exited: a command that "
        r"hands its work to an instance already running \(such as `firefox URL` while Firefox is "
        r"open\) returns at once; to hold for as long as you need, run `scanguardctl hold "
        r"--reason REASON` without a command and press Ctrl-C when done\n", r.stderr), r.stderr
    assert await holds(scenario) == []


async def test_a_command_that_runs_longer_is_not_warned_about(scenario):
    r = await asyncio.to_thread(scanguardctl, scenario.address, "hold", "--reason", "Café ☕",
                                "--", "sleep", str(QUICK_EXIT + 0.5))
    assert (r.returncode, r.stderr) == (0, "")
