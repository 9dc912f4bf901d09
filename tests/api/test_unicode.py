"""Users' text is not ASCII: every place a user's string reaches the daemon, with "Café ☕".

Finding (issue 8): Debian 12's python3-dbus-fast 1.84.2 writes a string's length in characters,
so the first non-ASCII string the daemon sent got it thrown off the bus: a profile renamed to
"Café" (the Devices update), a Hold with an "é" anywhere (the error reply echoes it), a config
value with "µ" and Reload.  With a hold active bgscan then stayed "" after the holder left.
These run with each D-Bus library (the Makefile sets SCANGUARD_DBUS_LIB).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import subprocess
import sys

import pytest

from nm_scanguard import dbuslib
from nm_scanguard.names import ERROR_BAD_CONFIG, INVALID_ARGS
from tests.api.harness import BGSCAN, api_call, error_of, named_holds, props, scanguardctl
from tests.conftest import assert_eventually

CAFE = "Café ☕"
QUOTED = f'"{BGSCAN}"'


def test_the_chosen_library_marshals_non_ascii_by_bytes():
    assert dbuslib.marshals_utf8(dbuslib.LIBRARY)


@pytest.mark.parametrize("name", dbuslib.KNOWN)
def test_a_library_that_marshals_wrongly_is_skipped_even_when_asked_for(name):
    try:
        importlib.import_module(name)
    except ImportError:
        pytest.fail(f"{name} is not installed: make test installs both D-Bus libraries")
    probe = ("import nm_scanguard.dbuslib as d; print(d.LIBRARY); print(*d.SKIPPED, sep='\\n')")
    env = dict(os.environ, SCANGUARD_DBUS_LIB=name)
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    if dbuslib.marshals_utf8(name):
        assert out[0] == name
    else:  # e.g. python3-dbus-fast 1.84.2 on Debian 12
        assert out[0] != name and dbuslib.marshals_utf8(out[0])
        assert out[1].startswith(f"{name} ") and "wrong length" in out[1]


async def alive(scenario) -> bool:
    """The daemon still owns its name and answers."""
    return (await props(scenario.bus))["Version"] != "" and scenario.daemon.returncode() is None


async def test_a_profile_renamed_to_non_ascii_is_shown_and_the_daemon_stays(scenario):
    scenario.nm.rename_profile(scenario.conn, f"{CAFE} lab")
    await assert_eventually(lambda: _connection_id(scenario, f"{CAFE} lab"), message="renamed")
    assert await alive(scenario)
    r = await asyncio.to_thread(scanguardctl, scenario.address, "status")
    assert r.returncode == 0 and f"'{CAFE} lab'" in r.stdout, r.stdout + r.stderr
    # and the guard still works on it: a hold suspends, its release restores
    reply = await api_call(scenario.bus, "Hold", "sss", [CAFE, "org.example.Café", ""])
    assert error_of(reply) is None, reply.body
    await assert_eventually(lambda: scenario.bgscan() == '""', message="bgscan suspended")
    assert error_of(await api_call(scenario.bus, "Release", "u", reply.body)) is None
    await assert_eventually(lambda: scenario.bgscan() == QUOTED, message="bgscan restored")
    assert await alive(scenario)


async def _connection_id(scenario, name: str) -> bool:
    dev = await scenario.device()
    return dev is not None and dev["connection_id"] == name


async def test_hold_texts_are_shown_as_given(scenario):
    reply = await api_call(scenario.bus, "Hold", "sss", [f"{CAFE} appel vidéo", f"org.{CAFE}", ""])
    assert error_of(reply) is None, reply.body
    (hold,) = await named_holds(scenario.bus)
    assert (hold["reason"], hold["application_id"]) == (f"{CAFE} appel vidéo", f"org.{CAFE}")
    await assert_eventually(lambda: scenario.bgscan() == '""', message="bgscan suspended")
    r = await asyncio.to_thread(scanguardctl, scenario.address, "status", "--json")
    assert CAFE in r.stdout and r.returncode == 0
    # The holder leaves: bgscan comes back (the promise that broke with dbus-fast 1.84.2).
    scenario.bus.disconnect()
    await asyncio.sleep(0.1)
    from nm_scanguard.dbuslib import MessageBus
    scenario.bus = await MessageBus(bus_address=scenario.address).connect()
    await assert_eventually(lambda: scenario.bgscan() == QUOTED, message="bgscan restored")
    assert await alive(scenario)


@pytest.mark.parametrize("interface", ["wlé0", "Café☕", "wlan0\n", "é" * 8, ".."])
async def test_refused_arguments_are_echoed_safely(scenario, interface):
    reply = await api_call(scenario.bus, "Hold", "sss", [CAFE, CAFE, interface])
    name, text = error_of(reply)
    assert name == INVALID_ARGS
    assert "\n" not in text and len(text) < 300
    assert await alive(scenario)
    assert (await props(scenario.bus))["ActiveHolds"] == []
    reply = await api_call(scenario.bus, "DeviceEvent", "sss", [interface, "up", CAFE])
    assert error_of(reply)[0] == INVALID_ARGS
    reply = await api_call(scenario.bus, "DeviceEvent", "sss", [scenario.ifname, CAFE, ""])
    name, text = error_of(reply)
    assert name == INVALID_ARGS and CAFE in text
    assert await alive(scenario)


async def test_texts_over_the_cap_are_refused_in_bytes(scenario):
    reply = await api_call(scenario.bus, "Hold", "sss", ["☕" * 100, "", ""])  # 300 bytes
    name, text = error_of(reply)
    assert name == INVALID_ARGS and "300 bytes" in text
    reply = await api_call(scenario.bus, "Hold", "sss", ["☕" * 85, "", ""])  # 255 bytes: fine
    assert error_of(reply) is None, reply.body
    assert await alive(scenario)


async def test_scanguardctl_hold_with_a_non_ascii_reason(scenario):
    r = await asyncio.to_thread(scanguardctl, scenario.address, "hold", "--reason", CAFE,
                                "--app-id", f"org.{CAFE}", "--", "true")
    assert r.returncode == 0, r.stderr
    assert f"reason {CAFE!r}" not in r.stderr  # nothing went wrong on the way
    await assert_eventually(lambda: scenario.bgscan() == QUOTED, message="bgscan restored")
    assert f"'{CAFE}'" in scenario.daemon.log()
    assert await alive(scenario)


async def test_a_bad_non_ascii_config_value_is_refused_by_reload(scenario):
    scenario.daemon.config.write_text(f"[scanguard]\nsample_interval = 0.2\nthreshold_mbit = 5µ\n"
                                      f"# {CAFE}\n", encoding="utf-8")
    reply = await api_call(scenario.bus, "Reload")
    name, text = error_of(reply)
    assert name == ERROR_BAD_CONFIG and "'5µ'" in text
    assert await alive(scenario)
    scenario.daemon.config.write_text(f"# {CAFE}\n[scanguard]\nsample_interval = 0.2\n"
                                      "threshold_mbit = 7\n", encoding="utf-8")
    assert error_of(await api_call(scenario.bus, "Reload")) is None
    await assert_eventually(lambda: _threshold(scenario, 7.0), message="reloaded")


async def _threshold(scenario, value: float) -> bool:
    dev = await scenario.device()
    return dev is not None and dev["settings"]["threshold_mbit"] == value
