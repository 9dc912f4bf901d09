"""Thin helpers over the low-level message API shared by dbus-fast and dbus-next.

We talk to NetworkManager and wpa_supplicant with plain method calls instead of proxy objects:
proxies need an Introspect round trip per object, and NM re-creates objects all the time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from typing import Any, Iterable

from .dbuslib import Message, MessageBus, MessageType, Variant
from .names import DBUS

log = logging.getLogger("scanguard")


def _call_timeout(default: float = 10.0) -> float:
    """How long a peer may take to answer.  SCANGUARD_CALL_TIMEOUT (0.5 to 120 seconds) lets the
    fault-injection tests make late replies happen in seconds instead of tens of seconds."""
    text = os.environ.get("SCANGUARD_CALL_TIMEOUT", "").strip()
    if not text:
        return default
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", text, re.ASCII) and 0.5 <= float(text) <= 120:
        return float(text)
    log.warning("SCANGUARD_CALL_TIMEOUT=%r is not a number of seconds from 0.5 to 120; using %g",
                text[:20], default)
    return default


CALL_TIMEOUT = _call_timeout()


class BusError(Exception):
    """A D-Bus error reply (or a timeout), with the error name kept for callers to test."""

    def __init__(self, name: str, text: str) -> None:
        super().__init__(f"{name}: {text}" if text else name)
        self.name = name
        self.text = text


def unwrap(value: Any) -> Any:
    """Variants all the way down become plain Python values."""
    if isinstance(value, Variant):
        return unwrap(value.value)
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


async def call(
    bus: MessageBus,
    destination: str,
    path: str,
    interface: str,
    member: str,
    signature: str = "",
    body: Iterable[Any] = (),
    timeout: float = CALL_TIMEOUT,
) -> list[Any]:
    msg = Message(
        destination=destination, path=path, interface=interface, member=member,
        signature=signature, body=list(body),
    )
    try:
        reply = await asyncio.wait_for(bus.call(msg), timeout)
    except asyncio.TimeoutError:
        raise BusError("org.freedesktop.DBus.Error.Timeout",
                       f"{destination} did not answer {member} within {timeout:g} s") from None
    if reply.message_type == MessageType.ERROR:
        text = reply.body[0] if reply.body and isinstance(reply.body[0], str) else ""
        raise BusError(reply.error_name or "unknown", text)
    return list(reply.body)


async def get_property(bus: MessageBus, destination: str, path: str, interface: str, name: str) -> Any:
    (value,) = await call(bus, destination, path, "org.freedesktop.DBus.Properties", "Get", "ss",
                          [interface, name])
    return unwrap(value)


async def get_all(bus: MessageBus, destination: str, path: str, interface: str) -> dict[str, Any]:
    (values,) = await call(bus, destination, path, "org.freedesktop.DBus.Properties", "GetAll", "s",
                           [interface])
    result: dict[str, Any] = unwrap(values)
    return result


async def set_property(bus: MessageBus, destination: str, path: str, interface: str, name: str,
                       value: Variant) -> None:
    await call(bus, destination, path, "org.freedesktop.DBus.Properties", "Set", "ssv",
               [interface, name, value])


async def add_match(bus: MessageBus, rule: str) -> None:
    await call(bus, *DBUS, "AddMatch", "s", [rule])


async def name_has_owner(bus: MessageBus, name: str) -> bool:
    (owned,) = await call(bus, *DBUS, "NameHasOwner", "s", [name])
    return bool(owned)


async def owner_pid(bus: MessageBus, name: str) -> int | None:
    """The pid of the process that owns `name` on the bus, or None if nobody does (or the bus
    will not say): what any user may ask, also in a sandbox that hides /proc."""
    try:
        if not await name_has_owner(bus, name):
            return None
        (pid,) = await call(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                            "org.freedesktop.DBus", "GetConnectionUnixProcessID", "s", [name])
        return int(pid)
    except BusError:
        return None


FLUSH_TIMEOUT = 2.0  # seconds a stopping daemon waits for its last messages to leave


async def close_bus(bus: MessageBus, timeout: float = FLUSH_TIMEOUT) -> None:
    """Disconnect after the messages already queued have been written.

    The library's disconnect() shuts the socket down at once: signals and replies still in its
    write queue (the last PropertiesChanged of a stopping daemon) are lost, and the send that
    was being written fails with EPIPE -- which asyncio logged as "Future exception was never
    retrieved" with a traceback in the journal at `systemctl stop`.  The writer is first in,
    first out, so once the bus answers a Ping sent now, everything queued before it is out.
    A bus that does not answer within `timeout` is closed anyway; then the loop turns until
    the library has finished with the connection (at most `timeout` more), so that failures
    are seen while it runs."""
    if bus.connected:
        try:
            await call(bus, DBUS[0], DBUS[1], "org.freedesktop.DBus.Peer", "Ping", timeout=timeout)
        except Exception as e:  # a bus that is gone or hangs: nothing more can be delivered
            log.debug("flushing the bus connection before closing it: %r", e)
    bus.disconnect()
    # Polled, not awaited: the library's disconnect future is cancelled along with any task that
    # awaited it (the daemon's bus watch, cancelled at the stop).
    end = asyncio.get_running_loop().time() + timeout
    while bus.connected and asyncio.get_running_loop().time() < end:
        await asyncio.sleep(0.01)
    for _ in range(2):  # done-callbacks of sends that failed on the closed socket
        await asyncio.sleep(0)
