"""An off switch that stays off.  Bus activation starts the service at every `scanguardctl`
call and every dispatcher event, so `systemctl stop` lasts until the next one; the switches
that last are `systemctl mask scanguard` and `enabled = no` in the settings file.  Here:
`scanguardctl status` says which, with exit status 3; the dispatcher script keeps quiet about
a masked unit; and a daemon whose file says `enabled = no` gives back what it suspended and
grants no hold.

systemd is faked: a `systemctl` first on PATH answers `is-enabled`, and a connection that owns
the service's name answers as dbus-daemon does when activation meets a masked unit.  The
daemon is the real one on a private bus (tests/api/conftest.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nm_scanguard.cli.off import OFF_EXIT, UNIT_MASKED
from nm_scanguard.dbuslib import Message, MessageBus, MessageType
from tests.api.harness import BGSCAN, NAME, REPO, env_for, named_holds, scanguardctl
from tests.api.test_dispatcher import SCRIPT, fake_sysfs, nm_env
from tests.conftest import assert_eventually

MASKED = ("scanguardctl: nm-scanguard is off: scanguard.service is masked (systemctl unmask "
          "scanguard to turn it back on)\n")
NOT_RUNNING = "scanguardctl: the scanguard service is not running and could not be started"


def fake_systemctl(tmp_path: Path, answer: str) -> tuple[Path, Path]:
    """A directory with a `systemctl` whose `is-enabled scanguard.service` prints `answer`
    (exit 1 unless "enabled", as systemctl does), and the file it logs its arguments to."""
    bindir, log = tmp_path / "bin", tmp_path / "systemctl.log"
    bindir.mkdir(exist_ok=True)
    tool = bindir / "systemctl"
    tool.write_text(f'#!/bin/sh\necho "$*" >>"{log}"\n'
                    f'[ "$*" = "is-enabled scanguard.service" ] || exit 2\n'
                    f'echo {answer}\n[ {answer} = enabled ]\n')
    tool.chmod(0o755)
    return bindir, log


def ctl(address: str, bindir: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(env_for(address), PATH=f"{bindir}:{os.environ['PATH']}")
    return subprocess.run([sys.executable, "-m", "nm_scanguard.cli.scanguardctl", *args],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=30)


# ---- masked: bus activation fails ---------------------------------------------------------

@pytest.mark.parametrize("answer", ["masked", "masked-runtime"])
async def test_status_of_a_masked_unit_says_it_is_off_and_how_to_undo_it(system_bus, tmp_path,
                                                                         answer):
    """No daemon on the bus, the name cannot be activated (dbus-broker's answer), and
    systemctl says the unit is masked."""
    bindir, log = fake_systemctl(tmp_path, answer)
    r = await asyncio.to_thread(ctl, system_bus.address, bindir, "status")
    assert (r.returncode, r.stdout, r.stderr) == (OFF_EXIT, "", MASKED)
    assert log.read_text() == "is-enabled scanguard.service\n"
    r = await asyncio.to_thread(ctl, system_bus.address, bindir, "hold", "--reason", "Café ☕")
    assert r.returncode == 125
    assert r.stderr == "scanguardctl: no hold could be taken: " + MASKED.split(": ", 1)[1]


@pytest.mark.parametrize("answer", ["enabled", "disabled", "static"])
async def test_a_service_that_is_not_masked_is_not_called_off(system_bus, tmp_path, answer):
    bindir, _ = fake_systemctl(tmp_path, answer)
    r = await asyncio.to_thread(ctl, system_bus.address, bindir, "status")
    assert r.returncode == 1 and r.stderr.startswith(NOT_RUNNING), r.stderr


async def test_dbus_daemons_masked_unit_error_is_said_plainly(system_bus, tmp_path):
    """dbus-daemon passes on systemd's UnitMasked when a call would start a masked unit."""
    bus = await MessageBus(bus_address=system_bus.address).connect()

    def as_dbus_daemon(msg: Message):
        if msg.message_type == MessageType.METHOD_CALL and msg.destination == NAME:
            return Message.new_error(msg, UNIT_MASKED, "Unit scanguard.service is masked.")
        return None

    try:
        bus.add_message_handler(as_dbus_daemon)
        await bus.request_name(NAME)
        bindir, log = fake_systemctl(tmp_path, "enabled")
        r = await asyncio.to_thread(ctl, system_bus.address, bindir, "status")
        assert (r.returncode, r.stdout, r.stderr) == (OFF_EXIT, "", MASKED)
        assert not log.exists()  # the error says it all
        r = await asyncio.to_thread(ctl, system_bus.address, bindir, "hold", "--reason",
                                    "Café ☕", "--", "sh", "-c", "exit 4")
        assert r.returncode == 4
        assert r.stderr.startswith("scanguardctl: warning: running sh without a hold, so Wi-Fi "
                                   "background scans may run during it: nm-scanguard is off: "
                                   "scanguard.service is masked"), r.stderr
    finally:
        bus.disconnect()


@pytest.mark.parametrize("where", ["etc", "run"])  # systemctl mask, and mask --runtime
async def test_the_dispatcher_script_leaves_a_masked_unit_alone(scenario, tmp_path, where):
    """A masked unit gets no DeviceEvent (the bus would try to start it and log the failure at
    every event); the script stays silent and exits 0 as always."""
    sysfs = fake_sysfs(tmp_path / "net", [scenario.ifname])
    units = {d: tmp_path / d / "systemd" / "system" for d in ("etc", "run")}
    for d in units.values():
        d.mkdir(parents=True)

    def dispatch() -> subprocess.CompletedProcess:
        env = nm_env(scenario.address, sysfs, scenario.ifname, "up")
        env["SCANGUARD_UNIT_DIRS"] = f"{units['etc']} {units['run']}"
        return subprocess.run([str(SCRIPT), scenario.ifname, "up"], env=env,
                              capture_output=True, text=True, timeout=20)

    before = scenario.daemon.log().count("dispatcher:")
    (units[where] / "scanguard.service").symlink_to("/dev/null")
    r = await asyncio.to_thread(dispatch)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    (units[where] / "scanguard.service").unlink()  # unmasked
    # an overriding unit file of the administrator's own is no mask
    (units[where] / "scanguard.service").symlink_to("/lib/systemd/system/scanguard.service")
    r = await asyncio.to_thread(dispatch)  # the script waits for the reply
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    assert scenario.daemon.log().count("dispatcher:") == before + 1


# ---- enabled = no: the daemon runs and does nothing ------------------------------------------

@pytest.mark.parametrize("reason", ["video call", "Café ☕"])
async def test_enabled_no_gives_back_what_it_holds_and_status_says_it_is_off(scenario, reason):
    conf = scenario.daemon.config
    hold = subprocess.Popen([sys.executable, "-m", "nm_scanguard.cli.scanguardctl", "hold",
                             "--reason", reason], env=env_for(scenario.address), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        await assert_eventually(lambda: scenario.bgscan() == '""', message="bgscan suspended")
        conf.write_text("[scanguard]\nsample_interval = 0.2\n# Café ☕\nenabled = no\n",
                        encoding="utf-8")
        r = await asyncio.to_thread(scanguardctl, scenario.address, "reload")
        assert r.returncode == 0, r.stderr
        await assert_eventually(lambda: scenario.bgscan() == f'"{BGSCAN}"',
                                message="bgscan given back")
        assert [h["reason"] for h in await named_holds(scenario.bus)] == [reason]

        r = await asyncio.to_thread(scanguardctl, scenario.address, "status")
        assert r.returncode == OFF_EXIT, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0] == (f"nm-scanguard is off: enabled = no in {conf} (set enabled = yes "
                            "there and run `scanguardctl reload` to turn it back on)")
        assert lines[1].startswith(f"{scenario.ifname} ('Home'): disabled for "), lines
        assert f"(nm-scanguard is off: enabled = no in {conf})" in lines[1]
        r = await asyncio.to_thread(scanguardctl, scenario.address, "status", "--json")
        assert r.returncode == OFF_EXIT
        doc = json.loads(r.stdout)
        assert doc["off"] == f"enabled = no in {conf}"
        assert doc["devices"][0]["state"] == "disabled"

        r = await asyncio.to_thread(scanguardctl, scenario.address, "hold", "--reason", reason)
        assert r.returncode == 125 and r.stdout == ""
        assert r.stderr == (f"scanguardctl: no hold could be taken: nm-scanguard is off: "
                            f"enabled = no in {conf}, so a hold would keep nothing off; an "
                            "administrator turns it on with enabled = yes there and "
                            "`scanguardctl reload`\n")
        await asyncio.sleep(1)
        assert scenario.bgscan() == f'"{BGSCAN}"'  # the hold still listed keeps nothing off

        conf.write_text("[scanguard]\nsample_interval = 0.2\n", encoding="utf-8")
        r = await asyncio.to_thread(scanguardctl, scenario.address, "reload")
        assert r.returncode == 0, r.stderr
        await assert_eventually(lambda: scenario.bgscan() == '""',
                                message="on again: the hold still there suspends bgscan")
        r = await asyncio.to_thread(scanguardctl, scenario.address, "status")
        assert r.returncode == 0 and "nm-scanguard is off" not in r.stdout
    finally:
        hold.kill()
        hold.wait()
