"""nm_scanguard.peers.bus.close_bus: a stopping daemon's last messages reach the bus, and nothing is
logged for the closed socket.

At `systemctl stop` the daemon emits its last PropertiesChanged/HoldsChanged signals and then
disconnected at once; the library's disconnect() shuts the socket down with those still queued,
so clients (`scanguardctl monitor`, a backup tool holding) never saw them, and the send being
written failed with EPIPE, logged by asyncio as "Future exception was never retrieved" with a
traceback (the package VM's journal check failed on it, Debian 12, dbus-next 0.2.3).
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
from typing import Any

from nm_scanguard.peers.bus import call, close_bus
from nm_scanguard.dbuslib import Message, MessageBus

COUNT = 20
PAYLOAD = "Café ☕ " * 15000  # ≈ 150 kB each: most of them are still queued at the disconnect


async def _listener(address: str, received: list[str]) -> MessageBus:
    rx = await MessageBus(bus_address=address).connect()
    await call(rx, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
               "AddMatch", "s", ["type='signal',interface='test.CloseBus'"])
    rx.add_message_handler(
        lambda m: received.append(m.body[0]) if m.member == "Last" else None)
    return rx


async def _send_and_close(address: str, close) -> tuple[list[str], list[dict[str, Any]]]:
    loop = asyncio.get_running_loop()
    logged: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: logged.append(context))
    received: list[str] = []
    rx = await _listener(address, received)
    tx = await MessageBus(bus_address=address).connect()
    try:
        for _ in range(COUNT):
            tx.send(Message.new_signal("/test", "test.CloseBus", "Last", "s", [PAYLOAD]))
        await close(tx)
        for _ in range(100):  # the listener reads what the bus got (2 s at most)
            if len(received) == COUNT:
                break
            await asyncio.sleep(0.02)
        gc.collect()
        await asyncio.sleep(0)
        return received, logged
    finally:
        rx.disconnect()
        loop.set_exception_handler(None)


async def test_close_bus_delivers_what_was_queued_and_logs_nothing(system_bus) -> None:
    received, logged = await _send_and_close(system_bus.address, close_bus)
    assert len(received) == COUNT, f"{len(received)} of {COUNT} signals arrived"
    assert all(body == PAYLOAD for body in received)
    assert logged == [], logged


async def test_the_librarys_disconnect_alone_loses_them(system_bus) -> None:
    """The control: what close_bus exists for."""
    async def disconnect(bus: MessageBus) -> None:
        bus.disconnect()

    received, _ = await _send_and_close(system_bus.address, disconnect)
    assert len(received) < COUNT, "the plain disconnect delivered everything: the control is void"


async def test_close_bus_on_a_hung_bus_gives_up_after_its_timeout(system_bus) -> None:
    """A dbus-daemon that answers nothing (stopped) does not keep the daemon from exiting."""
    tx = await MessageBus(bus_address=system_bus.address).connect()
    os.kill(system_bus.process.pid, signal.SIGSTOP)
    try:
        await asyncio.wait_for(close_bus(tx, timeout=0.5), 10)
    finally:
        os.kill(system_bus.process.pid, signal.SIGCONT)
    assert not tx.connected


async def test_close_bus_on_a_closed_connection_is_harmless(system_bus) -> None:
    tx = await MessageBus(bus_address=system_bus.address).connect()
    tx.disconnect()
    await asyncio.wait_for(tx.wait_for_disconnect(), 5)
    await asyncio.wait_for(close_bus(tx), 10)
    assert not tx.connected


async def test_close_bus_after_a_cancelled_watch_of_the_disconnect(system_bus) -> None:
    """The daemon's pattern: a task awaiting wait_for_disconnect() is cancelled at the stop,
    which cancels the library's disconnect future too; closing must not raise for that."""
    tx = await MessageBus(bus_address=system_bus.address).connect()
    watch = asyncio.ensure_future(tx.wait_for_disconnect())
    await asyncio.sleep(0)
    watch.cancel()
    await asyncio.wait_for(close_bus(tx), 10)
    assert not tx.connected
