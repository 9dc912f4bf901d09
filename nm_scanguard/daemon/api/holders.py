"""The holders on the bus: a NameOwnerChanged match for each caller that holds or is taking a
hold, and its holds ended when it leaves the bus."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, Protocol

from ...dbuslib import Message, MessageBus, MessageType
from ...names import DBUS
from ...peers.bus import BusError, add_match, call, name_has_owner
from ...text import quoted
from .holds import Hold, Holds

log = logging.getLogger("scanguard.api")


class Holding(Protocol):
    """What the watch needs of the daemon (Daemon provides it)."""

    holds: Holds

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[None]: ...


def _owner_rule(name: str) -> str:
    return ("type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',"
            f"member='NameOwnerChanged',arg0='{name}'")


class HolderWatch:
    """Watches each caller that holds or is taking a hold; ends its holds when it leaves."""

    def __init__(self, bus: MessageBus, daemon: Holding) -> None:
        self.bus = bus
        self.daemon = daemon
        self.holds = daemon.holds
        # Callers whose NameOwnerChanged we subscribe to, each with its AddMatch (maybe in flight).
        self._watched: dict[str, asyncio.Future[None]] = {}

    async def has_owner(self, name: str) -> bool:
        try:
            return await name_has_owner(self.bus, name)
        except BusError:
            return False

    async def watch(self, sender: str) -> None:
        """Return once the bus tells us when `sender` leaves.  Concurrent Holds of one caller
        share one AddMatch and all wait for it: a second Hold must not go on to commit while
        the first one's match is still on its way (the caller could leave unseen meanwhile)."""
        adding = self._watched.get(sender)
        if adding is None:
            adding = self._watched[sender] = asyncio.ensure_future(
                add_match(self.bus, _owner_rule(sender)))
        try:
            await asyncio.shield(adding)
        except BusError:
            if self._watched.get(sender) is adding:
                del self._watched[sender]  # not watched: the next Hold asks again
            raise

    def unwatch(self, sender: str) -> None:
        adding = self._watched.get(sender)
        if adding is not None and sender not in self.holds.callers():
            del self._watched[sender]
            self.daemon.spawn(self._remove_match(_owner_rule(sender), adding))

    async def _remove_match(self, rule: str, added: asyncio.Future[None]) -> None:
        try:
            await added  # a RemoveMatch sent before its AddMatch would leave the rule behind
        except BusError:
            return  # it was never added
        try:
            await call(self.bus, *DBUS, "RemoveMatch", "s", [rule])
        except BusError as e:
            log.debug("RemoveMatch failed: %s", e)

    def on_signal(self, msg: Message) -> None:
        if (msg.message_type == MessageType.SIGNAL and msg.member == "NameOwnerChanged"
                and msg.sender == DBUS[0]):
            name, _old, new = msg.body
            if not new and name in self._watched:
                for hold in self.holds.caller_left(name):
                    self.ended(hold, "its holder left the bus")
                self.unwatch(name)

    def ended(self, hold: Hold, why: str) -> None:
        log.info("hold %d (%s) %s", hold.cookie, quoted(hold.application_id) if hold.application_id
                 else hold.caller, why)
        self.unwatch(hold.caller)
