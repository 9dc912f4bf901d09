"""dispatcher.d/90-scanguard, run the way NetworkManager-dispatcher runs it, against the private bus."""

from __future__ import annotations

import asyncio
import stat
import subprocess
import time
from pathlib import Path

from nm_scanguard.dbuslib import Message, MessageBus, MessageType
from tests.api.harness import NAME, REPO

SCRIPT = REPO / "dispatcher.d" / "90-scanguard"


def nm_env(address: str, sysfs: Path, ifname: str, action: str) -> dict[str, str]:
    """What NetworkManager-dispatcher passes (a clean environment, no inherited variables)."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DBUS_SYSTEM_BUS_ADDRESS": address,
           "SCANGUARD_SYSFS_NET": str(sysfs), "NM_DISPATCHER_ACTION": action,
           "CONNECTION_UUID": "3f1c7a52-0d7e-4b7b-9c35-6a1d2b0f7e11", "CONNECTION_ID": "Home",
           "CONNECTION_DBUS_PATH": "/org/freedesktop/NetworkManager/Settings/1"}
    if ifname:
        env.update(DEVICE_IFACE=ifname, DEVICE_IP_IFACE=ifname)
    return env


def fake_sysfs(root: Path, wifi: list[str], other: list[str] = ()) -> Path:
    """A /sys/class/net look-alike: Wi-Fi netdevs have a `wireless` directory."""
    for name in wifi:
        (root / name / "wireless").mkdir(parents=True)
    for name in other:
        (root / name).mkdir(parents=True)
    return root


def run(env: dict[str, str], *args: str, cwd: Path | None = None) -> tuple[int, float, str]:
    start = time.monotonic()
    r = subprocess.run([str(SCRIPT), *args], env=env, cwd=cwd, capture_output=True, text=True,
                       timeout=20)
    return r.returncode, time.monotonic() - start, r.stdout + r.stderr


def test_script_is_installable_as_networkmanager_requires():
    mode = SCRIPT.stat().st_mode
    assert mode & stat.S_IXUSR and not mode & (stat.S_IWGRP | stat.S_IWOTH | stat.S_ISUID)
    assert subprocess.run(["sh", "-n", str(SCRIPT)]).returncode == 0
    assert SCRIPT.read_text().startswith("#!/bin/sh\n")


async def test_wifi_events_reach_the_daemon_and_others_do_not(scenario, tmp_path):
    sysfs = fake_sysfs(tmp_path / "net", [scenario.ifname], ["eth0"])
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    daemon_log = scenario.daemon.log

    for action in ("up", "reapply", "pre-down", "down"):
        env = nm_env(scenario.address, sysfs, scenario.ifname, action)
        rc, took, out = await asyncio.to_thread(run, env, scenario.ifname, action, cwd=workdir)
        assert (rc, out) == (0, "")
        assert took < 3
        # The script waits for the reply, and the daemon logs before replying.
        assert f"dispatcher: {scenario.ifname} {action} (connection 3f1c7a52" in daemon_log()

    rc, _, _ = await asyncio.to_thread(run, nm_env(scenario.address, sysfs, "", "connectivity-change"),
                                       "", "connectivity-change")
    assert rc == 0 and "dispatcher: - connectivity-change" in daemon_log()

    before = daemon_log().count("dispatcher:")
    for ifname, action in (("eth0", "up"), (scenario.ifname, "dhcp4-change"), (scenario.ifname, "hostname")):
        rc, took, out = await asyncio.to_thread(run, nm_env(scenario.address, sysfs, ifname, action),
                                                ifname, action)
        assert (rc, out) == (0, "") and took < 0.5
    # Prove the daemon is still answering, so that nothing is merely late.
    env = nm_env(scenario.address, sysfs, scenario.ifname, "up")
    await asyncio.to_thread(run, env, scenario.ifname, "up")
    assert daemon_log().count("dispatcher:") == before + 1
    assert list(workdir.iterdir()) == []  # nothing written


async def test_service_absent_returns_zero_at_once(system_bus, tmp_path):
    sysfs = fake_sysfs(tmp_path / "net", ["wlan0"])
    env = nm_env(system_bus.address, sysfs, "wlan0", "up")
    rc, took, out = await asyncio.to_thread(run, env, "wlan0", "up")
    assert (rc, out) == (0, "")
    assert took < 1.0


async def test_no_bus_at_all_returns_zero_at_once(tmp_path):
    sysfs = fake_sysfs(tmp_path / "net", ["wlan0"])
    env = nm_env(f"unix:path={tmp_path}/no-such-socket", sysfs, "wlan0", "up")
    rc, took, out = await asyncio.to_thread(run, env, "wlan0", "up")
    assert (rc, out) == (0, "")
    assert took < 1.0


async def test_a_hung_service_cannot_block_networkmanager(system_bus, tmp_path):
    """Something owns the name and never answers: the script gives up within its bound."""
    bus = await MessageBus(bus_address=system_bus.address).connect()
    swallowed: list[Message] = []

    def swallow(msg: Message):
        if msg.message_type == MessageType.METHOD_CALL and msg.destination == NAME:
            swallowed.append(msg)
            return True
        return None

    try:
        bus.add_message_handler(swallow)
        await bus.request_name(NAME)
        sysfs = fake_sysfs(tmp_path / "net", ["wlan0"])
        start = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            str(SCRIPT), "wlan0", "up", env=nm_env(system_bus.address, sysfs, "wlan0", "up"))
        try:
            rc = await asyncio.wait_for(proc.wait(), 10)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        took = time.monotonic() - start
        assert rc == 0
        assert len(swallowed) == 1 and swallowed[0].member == "DeviceEvent"
        assert swallowed[0].body == ["wlan0", "up", "3f1c7a52-0d7e-4b7b-9c35-6a1d2b0f7e11"]
        assert 1.5 < took < 3.5
    finally:
        bus.disconnect()

