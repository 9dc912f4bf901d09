"""Thin helpers over the low-level message API shared by dbus-fast and dbus-next.

We talk to NetworkManager and wpa_supplicant with plain method calls instead of proxy objects:
proxies need an Introspect round trip per object, and NM re-creates objects all the time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Iterable
from typing import Any

from ..dbuslib import BusType, Message, MessageBus, MessageType, Variant
from ..names import DBUS

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


class NoSystemBus(ConnectionError):
    """The system bus cannot be reached; `reason` is what the library said."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"cannot connect to the system bus ({reason}); is dbus running?")
        self.reason = reason


async def connect_system() -> MessageBus:
    """The system bus: the one way the daemon, scanguardctl and diagnose connect to it."""
    try:
        bus: MessageBus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    except Exception as e:  # a missing socket, a refused authentication, a broken library
        raise NoSystemBus(str(e)) from None
    return bus


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


# The errors of a call that got no answer: our own wait ran out, or the bus's.
TIMEOUT = "org.freedesktop.DBus.Error.Timeout"
NO_REPLY = "org.freedesktop.DBus.Error.NoReply"
# Our own connection closed while the call waited (the library ends it with the error that
# closed the stream: EOFError, or the socket's OSError): the peer may or may not have acted.
DISCONNECTED = "org.freedesktop.DBus.Error.Disconnected"


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
    if not getattr(bus, "connected", True):  # the library would wait out the timeout for it
        raise BusError(DISCONNECTED, f"the bus connection is closed: {member} was not sent to "
                       f"{destination}")
    try:
        reply = await asyncio.wait_for(bus.call(msg), timeout)
    except (EOFError, OSError) as e:  # TimeoutError is an OSError: told apart here
        _unless_cancelled()
        if isinstance(e, TimeoutError):
            raise BusError(TIMEOUT,
                           f"{destination} did not answer {member} within {timeout:g} s") from None
        raise BusError(DISCONNECTED, f"the bus connection closed before {destination} answered "
                       f"{member} ({str(e) or type(e).__name__})") from None
    _unless_cancelled()
    if reply.message_type == MessageType.ERROR:
        text = reply.body[0] if reply.body and isinstance(reply.body[0], str) else ""
        if len(reply.body) > 1 and isinstance(reply.body[1], str) and reply.body[1]:
            # wpa_supplicant's InvalidArgs names the fault in a second string ("Target BSS not
            # found"); the first alone says only that the arguments were wrong.
            text = f"{text} ({reply.body[1]})" if text else reply.body[1]
        raise BusError(reply.error_name or "unknown", text)
    return list(reply.body)


def _unless_cancelled() -> None:
    """Raise the cancellation of the running task if one is pending.  Python 3.11's wait_for
    hands back the call's outcome when the cancellation arrives as the call ends (CPython
    gh-86296, fixed in 3.12): a caller that takes a failed call in stride (a retry loop) would
    then run on, and whoever cancelled it would wait for it forever."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError()


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


NAME_HAS_NO_OWNER = "org.freedesktop.DBus.Error.NameHasNoOwner"


class NameOwners:
    """Who owns each of some well-known names now, so that a signal counts only from its real
    sender.  Any local user may send a signal to any connection (Debian's system.conf allows
    send_type="signal"), whatever its match rules say; the bus stamps every message with the
    unique name of the connection that sent it, and only the bus itself sends as
    org.freedesktop.DBus.  So a signal that claims to be a peer's counts when its sender owns
    the peer's name, and NameOwnerChanged when the bus sent it.

    `resolve()` after the NameOwnerChanged match rule is in place; then feed every
    NameOwnerChanged to `changed()`."""

    def __init__(self, names: Iterable[str]) -> None:
        self._owners: dict[str, str | None] = dict.fromkeys(names)
        self._changes: dict[str, int] = dict.fromkeys(self._owners, 0)

    async def resolve(self, bus: MessageBus) -> None:
        """Ask the bus for each name's owner (GetNameOwner), all at once.  Raises BusError if
        it will not say."""
        await asyncio.gather(*(self._resolve(bus, name) for name in self._owners))

    async def _resolve(self, bus: MessageBus, name: str) -> None:
        seen = self._changes[name]
        try:
            (owner,) = await call(bus, *DBUS, "GetNameOwner", "s", [name])
        except BusError as e:
            if e.name != NAME_HAS_NO_OWNER:
                raise
            owner = None
        # A NameOwnerChanged handled while the call was under way is at least as new as the
        # reply (the bus sends both in the order it made the changes).
        if self._changes[name] == seen:
            self._owners[name] = str(owner) if owner else None

    @staticmethod
    def from_bus(msg: Message) -> bool:
        return bool(msg.sender == DBUS[0])

    def changed(self, msg: Message) -> tuple[str, str] | None:
        """Take in a NameOwnerChanged signal: (name, new owner or "") if the bus sent it about
        one of our names, else None (forged, or not ours)."""
        if not self.from_bus(msg) or len(msg.body) != 3:
            return None
        name, _old, new = msg.body
        if name not in self._owners:
            return None
        self._owners[name] = new or None
        self._changes[name] += 1
        return name, new

    def sent_by(self, msg: Message, name: str) -> bool:
        """Whether `msg` comes from the connection that owns `name` now."""
        owner = self._owners.get(name)
        return owner is not None and bool(msg.sender == owner)

    def owner(self, name: str) -> str | None:
        return self._owners.get(name)


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
