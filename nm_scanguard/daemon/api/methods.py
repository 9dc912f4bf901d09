"""The system-bus API's methods: Hold, Release, Reload, DeviceEvent, the scan reports, and who
may call them.

The object itself (Introspect, Properties, signature checks) is served by export.py from the
canonical XML; what it shows and how its changes go out is properties.py.  Holds live in
the daemon's one table (holds.py); this module authenticates callers for it (callers.py)
and holders.py watches holders leave the bus.
"""

from __future__ import annotations

import logging
import math
import os
import time
from functools import partial
from typing import Protocol

from ...attribution import Request
from ...config import ConfigError
from ...dbuslib import Message, MessageBus
from ...names import (
    ACCESS_DENIED,
    ACTION_HOLD,
    ACTION_RELOAD,
    ERROR_BAD_CONFIG,
    ERROR_FAILED,
    ERROR_NOT_READY,
    ERROR_OFF,
    ERROR_TOO_MANY_HOLDS,
    ERROR_UNKNOWN_HOLD,
    IFACE,
    INVALID_ARGS,
    PATH,
    XML_INSTALLED,
    XML_NAME,
)
from ...peers.bus import BusError
from ...peers.values import valid_ifname
from ...text import clipped, quoted
from ..guard.policy import off_reason
from .callers import PolkitChecks, authorize, caller_uid, off_loop, reporter, user_name
from .export import CallError, ExportedObject, load_interface
from .holders import HolderWatch, Holding
from .holds import Hold, HoldError, check_text
from .properties import Announcer, Shown, holds, property_values, requests


class Guarding(Shown, Holding, Protocol):
    """What the API needs of the daemon behind it, and no more (Daemon provides it)."""

    async def reload(self) -> None: ...

    def schedule_sync(self) -> None: ...

    async def wifi_interfaces(self) -> list[str]: ...


log = logging.getLogger("scanguard.api")

DEVICE_ACTIONS = ("up", "down", "pre-down", "reapply", "connectivity-change")
LOG_HINT = " inside scanguardd; see its log (journalctl -u scanguard)"

_HOLD_ERRORS = {"too-many": ERROR_TOO_MANY_HOLDS, "unknown": ERROR_UNKNOWN_HOLD,
                "not-holder": ACCESS_DENIED, "bad-text": INVALID_ARGS, "caller-left": ERROR_FAILED}


def xml_path() -> str:
    """The XML shipped at the top of the package, or the copy installed for other programs."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    here = os.path.join(package, XML_NAME)
    return here if os.path.exists(here) else XML_INSTALLED


class Api:
    """The exported object's methods; each checks its caller and arguments, then asks the daemon."""

    def __init__(self, daemon: Guarding, bus: MessageBus) -> None:
        self.daemon = daemon
        self.holds = daemon.holds
        self.bus = bus
        self.checks = PolkitChecks()  # the polkit checks waiting, capped (callers)
        self.object = ExportedObject(
            bus, PATH, load_interface(xml_path(), IFACE),
            {"Hold": self._hold, "Release": self._release, "Reload": self._reload,
             "DeviceEvent": self._device_event, "ScanRequestDeferred": self._scan_request_deferred,
             "ScanRequestSeen": self._scan_request_seen,
             "GetRecentScanRequests": self._get_recent_scan_requests,
             "GetActiveHolds": self._get_active_holds},
            partial(property_values, daemon), LOG_HINT)
        self.holders = HolderWatch(bus, daemon)
        self.announcer = Announcer(daemon, self.object)

    def start(self) -> None:
        """Serve the object (before the name is owned: nobody can call until then)."""
        self.object.start()
        self.bus.add_message_handler(self.holders.on_signal)
        self.announcer.start()

    # ---- methods --------------------------------------------------------------------------

    async def _hold(self, msg: Message) -> Message:
        reason, app_id, interface = msg.body
        off = off_reason(self.daemon.settings)
        if off:
            raise CallError(ERROR_OFF, f"nm-scanguard is off: {off}, so a hold would keep "
                            "nothing off; an administrator turns it on with enabled = yes there "
                            "and `scanguardctl reload`")
        hold: Hold | None = None
        try:
            check_text("reason", reason)
            check_text("application_id", app_id)
            uid = await caller_uid(self.bus, msg.sender)
            # No await between the caps' check and the count (reserve), so that concurrent calls
            # cannot race past a cap.  Until polkit answers, the call counts only against the
            # caps of waiting calls, not against the holds': an agent that never answers must not
            # keep other users from holding.  Root is never asked.
            with self.holds.reserve(msg.sender, uid, granted=uid == 0) as slot:
                # Watched before polkit is asked: a caller leaving meanwhile voids the
                # reservation (caller_left); until then the reservation keeps the caller watched
                # (callers()), whatever happens to its other holds.
                await self.holders.watch(msg.sender)
                if not await self.holders.has_owner(msg.sender):  # left before the watch was in place
                    raise CallError(ERROR_FAILED, "the caller left the bus before the hold was taken")
                if interface:
                    await self._check_interface(interface)
                await authorize(self.bus, msg, uid, ACTION_HOLD, "suspend Wi-Fi background scanning",
                                self.checks)
                slot.grant()
                hold = slot.commit(reason, app_id, interface, time.time())
        except HoldError as e:
            raise CallError(_HOLD_ERRORS[e.kind], e.text) from None
        finally:
            # Any way out without a hold (the slot is given back by now): stop watching, unless
            # the caller holds or is taking another (callers() counts reservations).
            if hold is None:
                self.holders.unwatch(msg.sender)
        log.info("hold %d taken by %s (uid %d, %s) on %s: %s", hold.cookie,
                 quoted(app_id) if app_id else "an application", uid, msg.sender,
                 interface or "every interface", quoted(reason, 80) if reason else "no reason given")
        return Message.new_method_return(msg, "u", [hold.cookie])

    async def _release(self, msg: Message) -> Message:
        (cookie,) = msg.body
        hold = self.holds.get(cookie)
        # Only a caller who is not the holder needs to be root; ask the bus only then.  The
        # holder giving up its own hold needs no polkit: refusing would only keep bgscan off.
        is_root = (hold is not None and hold.caller != msg.sender
                   and await caller_uid(self.bus, msg.sender) == 0)
        try:
            hold = self.holds.release(cookie, msg.sender, is_root)
        except HoldError as e:
            raise CallError(_HOLD_ERRORS[e.kind], e.text) from None
        self.holders.ended(hold, f"released by {'its holder' if hold.caller == msg.sender else 'root'}")
        self.object.emit_signal("HoldReleased", "u", [hold.cookie], destination=hold.caller)
        return Message.new_method_return(msg)

    async def _reload(self, msg: Message) -> Message:
        uid = await caller_uid(self.bus, msg.sender)
        await authorize(self.bus, msg, uid, ACTION_RELOAD, "reload the scanguard configuration",
                        self.checks)
        try:
            await self.daemon.reload()
        except ConfigError as e:
            raise CallError(ERROR_BAD_CONFIG, f"{e}; the previous settings stay in force") from None
        return Message.new_method_return(msg)

    async def _device_event(self, msg: Message) -> Message:
        interface, action, uuid = msg.body
        if await caller_uid(self.bus, msg.sender) != 0:
            raise CallError(ACCESS_DENIED, "only root may call DeviceEvent; it is meant for the "
                            "NetworkManager dispatcher script")
        if action not in DEVICE_ACTIONS:
            raise CallError(INVALID_ARGS, f"action {quoted(action)} is not one of "
                            f"{', '.join(DEVICE_ACTIONS)}")
        if interface or action != "connectivity-change":
            await self._check_interface(interface)
        log.debug("dispatcher: %s %s (connection %s)", interface or "-", action, clipped(uuid) or "-")
        self.daemon.schedule_sync()  # a hint: sync() asks NetworkManager what is true
        return Message.new_method_return(msg)

    async def _scan_request_deferred(self, msg: Message) -> Message:
        """Counted, never acted on: the refusal already happened in polkitd.  Only the user
        that polkitd runs the rule's helper as (or root) may report, so that nobody else can
        inflate the counts; a report is only ever a number in the status and one log line.
        Kept for helpers older than ScanRequestSeen."""
        user, pid, program = msg.body
        who = await reporter(self.bus, msg, "ScanRequestDeferred", user, pid, program)
        counted = self.daemon.who_asked.scan_request_deferred(who)
        log.debug("scan request of %s refused by the polkit rule; counted on %d interface(s)",
                  who, counted)
        return Message.new_method_return(msg)

    async def _scan_request_seen(self, msg: Message) -> Message:
        """A NetworkManager scan request the polkit rule saw, refused or allowed, and when
        (`uptime`: the boot-time clock, 0 when the helper could not read it).  Refusals are
        counted as before; every request is kept a while (RecentScanRequests) so that
        `scanguardctl diagnose` can name the program behind a scan.  Only polkitd's helper and
        root may report, so the user and pid are those of polkit's subject (the bus's
        credentials of the asking connection); the program is /proc/PID/comm, the name a
        process gives itself (any process may set its own), so it names a program without
        proving which one it was."""
        user, pid, program, refused, uptime = msg.body
        who = await reporter(self.bus, msg, "ScanRequestSeen", user, pid, program)
        if not (isinstance(uptime, float) and math.isfinite(uptime) and uptime >= 0.0):
            raise CallError(INVALID_ARGS, f"uptime must be a number of seconds since boot, "
                            f"not {uptime!r}")
        at = wall_clock(uptime)
        counted = self.daemon.who_asked.scan_request_seen(
            Request(at=at, program=program, pid=pid, user=user), bool(refused), who)
        if refused:
            log.debug("scan request of %s refused by the polkit rule; counted on %d "
                      "interface(s)", who, counted)
        else:
            log.debug("scan request of %s allowed; kept for diagnose", who)
        self.announcer.requests_changed()
        return Message.new_method_return(msg)

    async def _get_recent_scan_requests(self, msg: Message) -> Message:
        """RecentScanRequests with the caller's own requests named (every request for root)."""
        uid = await caller_uid(self.bus, msg.sender)
        # The passwd lookup can go to the network (NSS: LDAP, SSSD): off the event loop.
        own = await off_loop(user_name, uid) if uid != 0 else ""
        return Message.new_method_return(msg, "a(dsusb)", [requests(self.daemon, uid, own).value])

    async def _get_active_holds(self, msg: Message) -> Message:
        """ActiveHolds with who holds and why filled in for the caller's user (all for root)."""
        uid = await caller_uid(self.bus, msg.sender)
        return Message.new_method_return(msg, "aa{sv}", [holds(self.daemon, uid).value])

    # ---- helpers --------------------------------------------------------------------------

    async def _check_interface(self, interface: str) -> None:
        """A Wi-Fi interface NetworkManager confirms; refused when it cannot confirm it."""
        if not valid_ifname(interface):
            raise CallError(INVALID_ARGS, f"{quoted(interface)} is not a valid interface name "
                            "(1 to 15 bytes, no '/', ':' or white space, not '.' or '..')")
        try:
            names = await self.daemon.wifi_interfaces()
        except BusError as e:
            raise CallError(ERROR_NOT_READY, f"cannot check interface {quoted(interface)} with "
                            f"NetworkManager ({e.name}); is NetworkManager running? Try again, or "
                            "use \"\" for every Wi-Fi interface") from None
        if interface not in names:
            raise CallError(INVALID_ARGS, f"NetworkManager knows no Wi-Fi interface "
                            f"{quoted(interface)} (Wi-Fi interfaces: {', '.join(names) or 'none'}); "
                            "use \"\" for every Wi-Fi interface")


def wall_clock(uptime: float) -> float:
    """The wall-clock time of a moment given on the boot-time clock (/proc/uptime), or now
    when it is 0 (unknown) or lies ahead (a report cannot come from the future)."""
    if uptime <= 0.0:
        return time.time()
    ago = time.clock_gettime(time.CLOCK_BOOTTIME) - uptime
    return time.time() - max(0.0, ago)
