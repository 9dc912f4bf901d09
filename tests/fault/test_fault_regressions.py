"""Plain regression tests for what the generated sequences found (or were built to find): each
is one fixed sequence, run in the same World and checked with the same invariant as
test_fault_injection.py, so that a fix stays fixed without waiting for Hypothesis to draw it.

Which finding each test holds down is said in its docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time

import pytest

from nm_scanguard.peers.bus import CALL_TIMEOUT, unwrap
from nm_scanguard.dbuslib import Message, MessageBus, MessageType
from tests.conftest import assert_eventually
from tests.fault.conftest import (IFACE, NAME, PATH, STEP_TIMEOUT, World, _disconnect,
                                  check_invariant)
from tests.peers import BGSCAN, DaemonProcess

CAFE = "Café ☕"
LATE_MS = int((CALL_TIMEOUT + 1.0) * 1000)
INVALID_ARGS = "org.freedesktop.DBus.Error.InvalidArgs"


@pytest.fixture
async def world(link, tmp_path):
    async with World(link, tmp_path) as w:
        yield w


async def engaged(world: World) -> None:
    """Traffic on until the daemon has set bgscan to "" on the current network."""
    world.link.send(mbit=8)

    async def suspended() -> bool:
        return (await world.peers.networks()).get(world.peers.net) == '""'
    await assert_eventually(suspended, timeout=10, message="bgscan suspended by traffic")


def hold(reason: str, app_id: str, interface: str) -> Message:
    return Message(destination=NAME, path=PATH, interface=IFACE, member="Hold", signature="sss",
                   body=[reason, app_id, interface])


async def test_journal_entry_is_retried_after_a_failed_replay(world):
    """Found by test_generated_sequences_never_leave_bgscan_off (Flood, FailNext, Crash): the
    daemon is killed while bgscan is suspended; wpa_supplicant fails the new instance's first
    calls, so replaying the crash journal fails ("kept for a later try") — and no later try
    came: bgscan stayed off.  Finding: the crash journal is fragile.  With UnknownMethod (CI,
    2026-11-23: Traffic, Crash, FailNext(UnknownMethod, 6)) the replay took the network for
    removed and dropped the entry, though it was still the interface's current network.
    Neither answer comes from a running wpa_supplicant for an object it has (docs/testing.md,
    "Only faults the real peers can produce"); the failure a real one gives is the bus's
    AccessDenied while a policy reload denies the daemon's user, and the unit tests of the
    Bgscan keep the unconfirmed "unknown object" case."""
    await engaged(world)
    world.daemon.process.kill()
    world.daemon.process.wait()
    world.link.stop()
    await world.peers.wpa_mock("SetFailNext", "su", ["org.freedesktop.DBus.Error.AccessDenied", 6])
    await world.start_daemon()
    await check_invariant(world, slow_peer=True)


async def test_crash_while_wpa_supplicant_hangs_then_restart_restores(world):
    """The release hangs in wpa_supplicant, the daemon is killed meanwhile, wpa_supplicant
    catches up: the journal must still hold the entry, and the next start restore it.
    Finding: the crash journal is fragile."""
    await engaged(world)
    await world.peers.wpa_mock("SetHang", "b", [True])
    world.link.stop()
    await asyncio.sleep(2.0)  # release_after is 1 s: the restore is stuck in wpa_supplicant
    world.daemon.process.kill()
    world.daemon.process.wait()
    await world.peers.wpa_mock("SetHang", "b", [False])
    await world.start_daemon()
    await check_invariant(world, slow_peer=True)


async def test_late_reply_to_the_suspending_set_does_not_leave_bgscan_off(world):
    """wpa_supplicant applies the Set "" at once but answers after the daemon's call timeout:
    the daemon counts the call as failed, yet bgscan is off.  When the link goes idle it must
    still be restored.  Finding: a late reply to the suspending Set leaves bgscan off."""
    await world.peers.wpa_mock("SetSetDelay", "u", [LATE_MS])
    world.link.send(mbit=8)

    async def set_sent() -> bool:
        return {"bgscan": ""} in await world.peers.sets()
    await assert_eventually(set_sent, timeout=10, message="the daemon sent Set bgscan \"\"")
    await asyncio.sleep(CALL_TIMEOUT + 1.5)  # the daemon gave up waiting; the reply came late
    world.link.stop()
    await check_invariant(world, slow_peer=True)


async def test_hold_flood_keeps_the_daemon_answering(world):
    """Eight clients pipeline 100 Holds each; Version must keep answering promptly throughout,
    and every hold must go with its client.  Finding: hold floods freeze the daemon."""
    clients = [await MessageBus(bus_address=world.address).connect() for _ in range(8)]
    try:
        calls = [asyncio.ensure_future(asyncio.wait_for(c.call(hold(f"flood {i} {CAFE}", "flood", "")),
                                                        30))
                 for c in clients for i in range(100)]
        slowest = 0.0
        while not all(c.done() for c in calls):
            start = time.monotonic()
            version = await world.get_property("Version", timeout=STEP_TIMEOUT)
            slowest = max(slowest, time.monotonic() - start)
            assert version, f"Version not answered during a hold flood:\n{world.logs()}"
            await asyncio.sleep(0.05)
        assert slowest < 2.0, f"Version took {slowest:.1f} s during a hold flood"
        replies = [c.result() for c in calls if not c.exception()]
        assert len(replies) == len(calls), "every Hold was answered (taken or refused)"
        taken = sum(1 for r in replies if r.message_type == MessageType.METHOD_RETURN)
        holds = await world.get_property("ActiveHolds")
        assert holds is not None and len(holds) == taken
    finally:
        for c in clients:
            _disconnect(c)

    async def no_holds() -> bool:
        return await world.get_property("ActiveHolds", timeout=2) == []
    await assert_eventually(no_holds, timeout=10, message="the holds went with their clients")
    await check_invariant(world, slow_peer=False)


@pytest.mark.parametrize("text", ["Home office", CAFE, "\U0001F4F6" * 10], ids=["ascii", "cafe", "non-bmp"])
async def test_non_ascii_names_and_reasons_are_served(world, text):
    """A profile name and a hold reason in any script go through the daemon and back out on
    the bus, and the daemon stays on it.  Finding: non-ASCII strings got the daemon thrown off
    the bus with python3-dbus-fast 1.84.2."""
    world.nm.rename_profile(world.peers.conn, text)

    async def renamed() -> bool:
        devices = await world.get_property("Devices", timeout=2) or []
        return any(d.get("connection_id") == text for d in devices)
    await assert_eventually(renamed, timeout=10, message="Devices shows the new profile name")
    client = await MessageBus(bus_address=world.address).connect()
    try:
        reply = await asyncio.wait_for(client.call(hold(text, text, "")), STEP_TIMEOUT)
        assert reply.message_type == MessageType.METHOD_RETURN, reply.body
        reply = await world.api(client, "GetActiveHolds")
        assert reply is not None and reply.message_type == MessageType.METHOD_RETURN
        (listed,) = unwrap(reply.body[0])
        assert (listed["reason"], listed["application_id"]) == (text, text)
        assert await world.owns_name()
    finally:
        _disconnect(client)
    await check_invariant(world, slow_peer=False)


@pytest.mark.parametrize("nm_running", [True, False], ids=["nm-running", "nm-away"])
async def test_interface_name_with_a_trailing_newline_is_refused(world, nm_running):
    """"wlan0\\n" is not an interface name: refused with InvalidArgs whether or not
    NetworkManager can be asked.  Finding: interface names with a trailing newline."""
    if not nm_running:
        world.nm.stop()
    client = await MessageBus(bus_address=world.address).connect()
    try:
        for name in (world.link.ifname + "\n", "wlan0\n", CAFE + "\n"):
            reply = await asyncio.wait_for(client.call(hold("x", "x", name)), STEP_TIMEOUT)
            assert reply.message_type == MessageType.ERROR, f"Hold on {name!r} was accepted"
            assert reply.error_name == INVALID_ARGS, (reply.error_name, reply.body)
        assert await world.get_property("ActiveHolds") == []
    finally:
        _disconnect(client)
    if not nm_running:
        world.nm.start()  # the world's invariant needs NM's profile back
        world.peers.dev, world.peers.ap, world.peers.conn = world.nm.add_wifi(world.link.ifname)
        await world.peers.activate()
    await check_invariant(world, slow_peer=False)


async def test_daemon_exits_non_zero_when_the_bus_goes_away(world):
    """The system bus dies (dbus-daemon restarted or crashed): the daemon cannot restore
    anything through it, so it must exit non-zero for systemd to restart it, not linger off
    the bus.  Finding: a lost bus is not noticed."""
    await engaged(world)
    world.link.stop()
    world.bus.stop()
    loop = asyncio.get_running_loop()
    try:
        status = await loop.run_in_executor(None, world.daemon.process.wait, 15)
    except Exception:
        raise AssertionError(f"scanguardd still runs 15 s after the bus went away:\n"
                             f"{world.logs()}") from None
    assert status != 0, f"scanguardd exited with status 0 after losing the bus:\n{world.logs()}"
    # The test's own connection lost the bus too: take its end (EOFError) here, or asyncio
    # prints "Future exception was never retrieved" with a traceback when the loop closes.
    with contextlib.suppress(Exception):
        await asyncio.wait_for(world.client.wait_for_disconnect(), STEP_TIMEOUT)


@pytest.mark.parametrize("content", [b"\xff\xfe\x00garbage", f"[scanguard]\nrelease_after = {CAFE}\n".encode(),
                                     b"[scanguard\nsample_interval = 0.2\n"],
                         ids=["bytes", "cafe-value", "broken-section"])
async def test_bad_config_on_sighup_and_reload_keeps_guarding(world, content):
    """A broken file given by SIGHUP or Reload is refused; the old settings keep working."""

    await engaged(world)
    world.daemon.config.write_bytes(content)
    world.daemon.process.send_signal(signal.SIGHUP)
    reply = await world.api(world.client, "Reload")
    assert reply is not None and reply.message_type == MessageType.ERROR, "a bad file was accepted"
    assert reply.error_name == IFACE + ".Error.BadConfig", (reply.error_name, reply.body)
    assert str(world.daemon.config) in reply.body[0]
    assert (await world.peers.networks())[world.peers.net] == '""', "still guarding"
    world.link.stop()
    await check_invariant(world, slow_peer=False)
    assert (await world.peers.networks())[world.peers.net] == f'"{BGSCAN}"'


async def test_two_reactivations_in_a_row_while_guarding(world):
    """Found by test_generated_sequences_never_leave_bgscan_off on 2026-11-23 (Flood, Hang,
    Reactivate, Reactivate, Reload): NetworkManager re-activates twice in a row while bgscan is
    suspended, so wpa_supplicant removes and re-adds the network at the same path twice.  The
    guard handled the first removal (forget the old object, suspend the newest one), then the
    second, which had arrived before that suspension read bgscan, and forgot the newest
    object's "" as if it had been removed: bgscan stayed off.  Both activations carry NM's
    bgscan, as two activations of one profile do: with different values in between, a suspend
    that reads the middle object and sets "" on the last one puts the middle value back there
    (wpa_supplicant has no compare-and-set; suspension.py, _put_back) -- a separate limit."""
    await engaged(world)
    await world.peers.reactivate(BGSCAN)
    await world.peers.reactivate(BGSCAN)
    await asyncio.sleep(1.0)  # the guard handles both removals and suspends the newest object
    world.link.stop()
    await check_invariant(world, slow_peer=False)


@pytest.mark.parametrize("bad", [f"{CAFE}\n", f"[scanguard]\nthreshold_mbit = {CAFE}\n"],
                         ids=["not-ini", "bad-value"])
async def test_a_start_with_a_bad_settings_file_still_restores(world, bad):
    """Found by the model rung (tests/model, 2026-11-25: LoseBus, Reload(bad file)): a settings
    file broken while the daemon ran -- a reload refuses it and keeps the old settings -- is read
    by the next start, which after a crash is the one that must replay the journal; it exited 1
    at once and bgscan stayed off until the next reconnect.  Now a start that cannot guard
    restores what the journal holds, says so, and exits 1."""
    await engaged(world)
    world.daemon.process.kill()
    world.daemon.process.wait()
    world.link.stop()
    broken = DaemonProcess(world.address, world.workdir, bad).start()
    assert broken.process.wait(timeout=STEP_TIMEOUT) == 1, broken.log()
    assert (await world.peers.networks()).get(world.peers.net) == f'"{BGSCAN}"', broken.log()
    assert "not guarding until the settings are fixed" in broken.log(), broken.log()
