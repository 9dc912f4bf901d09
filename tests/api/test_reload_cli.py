"""`scanguardctl reload` as a user runs it: the service re-reads its settings file, and a bad
file is refused with the daemon's reason, exit 1, the previous settings still in force."""

from __future__ import annotations

import asyncio

import pytest

from tests.api.harness import scanguardctl
from tests.conftest import assert_eventually


@pytest.mark.parametrize("bad", ["banana", "Café ☕"])
async def test_reload_applies_a_good_file_and_refuses_a_bad_one(scenario, bad):
    conf = scenario.daemon.config
    conf.write_text(f"[scanguard]\nsample_interval = 0.2\nthreshold_mbit = {bad}\n",
                    encoding="utf-8")
    r = await asyncio.to_thread(scanguardctl, scenario.address, "reload")
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr == (f"scanguardctl: {conf} [scanguard]: threshold_mbit = '{bad}' is not "
                        "valid; expected a number of Mbit/s from 0 to 100000; the previous "
                        "settings stay in force\n")
    assert (await scenario.device())["settings"]["threshold_mbit"] == 1.0

    conf.write_text("[scanguard]\nsample_interval = 0.2\nthreshold_mbit = 7\n")
    r = await asyncio.to_thread(scanguardctl, scenario.address, "reload")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "the scanguard service re-read its settings file\n"

    async def reloaded():
        return (await scenario.device())["settings"]["threshold_mbit"] == 7.0
    await assert_eventually(reloaded, message="new settings in force")


async def test_reload_without_the_service(system_bus):
    r = await asyncio.to_thread(scanguardctl, system_bus.address, "reload")
    assert r.returncode == 1
    assert r.stderr.startswith("scanguardctl: the scanguard service is not running")


async def test_reload_after_the_config_file_was_deleted_is_refused(scenario):
    """Started with --config FILE, the service reads that file only: once deleted, a reload is
    refused as the start would have been, not read as "built-in defaults"."""
    conf = scenario.daemon.config
    conf.write_text("[scanguard]\nsample_interval = 0.2\nthreshold_mbit = 7\n")
    r = await asyncio.to_thread(scanguardctl, scenario.address, "reload")
    assert r.returncode == 0, r.stderr
    conf.unlink()
    r = await asyncio.to_thread(scanguardctl, scenario.address, "reload")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (f"scanguardctl: {conf}: no such file, and the service reads only this "
                        "file (its --config): put it back, or restart it without --config; the "
                        "previous settings stay in force\n")
    assert (await scenario.device())["settings"]["threshold_mbit"] == 7.0
