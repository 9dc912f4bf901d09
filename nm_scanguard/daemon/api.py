"""The system-bus API's domain: Hold, Release, Reload, DeviceEvent and who may call them.

The object itself (Introspect, Properties, signature checks) is served by export.py from the
canonical XML.  Holds live in the daemon's one table (holds.py); this module authenticates
callers for it, watches holders leave the bus, and announces changes — coalesced to about one
PropertiesChanged a second per property, so that a client taking and releasing holds in a loop,
or a program asking NetworkManager for scans in a loop, cannot make the daemon write faster than
the bus reads.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import pwd
import time
from collections.abc import Coroutine
from typing import Any, Protocol

from .. import __version__
from ..attribution import Request
from ..config import ConfigError
from ..dbuslib import Message, MessageBus, MessageType, Variant
from ..ifname import valid_ifname
from ..names import (
    ACCESS_DENIED,
    ACTION_HOLD,
    ACTION_RELOAD,
    DBUS,
    ERROR_BAD_CONFIG,
    ERROR_FAILED,
    ERROR_NOT_READY,
    ERROR_TOO_MANY_HOLDS,
    ERROR_UNKNOWN_HOLD,
    IFACE,
    INVALID_ARGS,
    PATH,
    POLKIT,
    XML_INSTALLED,
    XML_NAME,
)
from ..peers.bus import BusError, add_match, call, name_has_owner
from ..status import DeviceStatus
from ..text import MAX_TEXT, clipped, cut, quoted
from .changes import Changes
from .export import CallError, ExportedObject, load_interface
from .holds import HOLD_FIELDS, Hold, HoldError, Holds, check_text
from .throttle import Throttle
from .who_asked import WhoAsked


def _devices(status: list[DeviceStatus]) -> Variant:
    return Variant("aa{sv}", [d.as_dbus() for d in status])


class Guarding(Protocol):
    """What the API needs of the daemon behind it, and no more (Daemon provides it)."""

    holds: Holds
    who_asked: WhoAsked
    state_changed: Changes[[str, str, str]]  # (interface, state, reason)
    changed: Changes[[]]  # any figure changed

    def status(self) -> list[DeviceStatus]: ...

    async def reload(self) -> None: ...

    def schedule_sync(self) -> None: ...

    async def wifi_interfaces(self) -> list[str]: ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[None]: ...

log = logging.getLogger("scanguard.api")

# The user polkitd runs rules' helpers as (polkit.spawn); only it and root may report deferrals.
POLKIT_USER = "polkitd"
MAX_PROGRAM = 64  # /proc/PID/comm is at most 15 bytes; anything much longer is not from it
DEVICE_ACTIONS = ("up", "down", "pre-down", "reapply", "connectivity-change")
DEVICES_EVERY = 1.0  # seconds between Devices PropertiesChanged while only figures change
HOLDS_EVERY = 1.0  # seconds between ActiveHolds PropertiesChanged under a stream of changes
REQUESTS_EVERY = 1.0  # seconds between RecentScanRequests PropertiesChanged under a stream of reports
POLKIT_TIMEOUT = 25.0
POLKIT_INTERACTIVE_TIMEOUT = 120.0  # a person may be typing a password
ALLOW_INTERACTIVE_AUTHORIZATION = 0x4  # message header flag
LOG_HINT = " inside scanguardd; see its log (journalctl -u scanguard)"

_HOLD_ERRORS = {"too-many": ERROR_TOO_MANY_HOLDS, "unknown": ERROR_UNKNOWN_HOLD,
                "not-holder": ACCESS_DENIED, "bad-text": INVALID_ARGS, "caller-left": ERROR_FAILED}


def xml_path() -> str:
    """The XML shipped at the top of the package, or the copy installed for other programs."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    here = os.path.join(package, XML_NAME)
    return here if os.path.exists(here) else XML_INSTALLED


def hold_as_dbus(hold: Hold) -> dict[str, Variant]:
    return {key: Variant(sig, getattr(hold, key)) for key, sig in HOLD_FIELDS.items()}


class Api:
    def __init__(self, daemon: Guarding, bus: MessageBus) -> None:
        self.daemon = daemon
        self.holds = daemon.holds
        self.bus = bus
        self.object = ExportedObject(
            bus, PATH, load_interface(xml_path(), IFACE),
            {"Hold": self._hold, "Release": self._release, "Reload": self._reload,
             "DeviceEvent": self._device_event, "ScanRequestDeferred": self._scan_request_deferred,
             "ScanRequestSeen": self._scan_request_seen,
             "GetRecentScanRequests": self._get_recent_scan_requests},
            self.property_values, LOG_HINT)
        # Callers whose NameOwnerChanged we subscribe to, each with its AddMatch (maybe in flight).
        self._watched: dict[str, asyncio.Future[None]] = {}
        self._devices_sent: list[Any] | None = None
        self._devices = Throttle(DEVICES_EVERY, self._send_devices)
        self._active_holds = Throttle(HOLDS_EVERY, lambda: self.object.emit_properties(["ActiveHolds"]))
        self._recent_requests = Throttle(REQUESTS_EVERY, self._send_requests)

    def start(self) -> None:
        """Serve the object (before the name is owned: nobody can call until then)."""
        self.object.start()
        self.bus.add_message_handler(self._on_signal)
        self.daemon.state_changed.connect(self._state_changed)
        self.daemon.changed.connect(self._devices.poke)
        self.holds.changed.connect(self._active_holds.poke)

    def property_values(self) -> dict[str, Variant]:
        return {
            "Version": Variant("s", __version__),
            "Devices": _devices(self.daemon.status()),
            "ActiveHolds": Variant("aa{sv}", [hold_as_dbus(h) for h in self.holds.all()]),
            "RecentScanRequests": self._requests(),
        }

    def _requests(self, reader: int | None = None, own: str = "") -> Variant:
        """The scan requests the polkit rule saw, as user `reader` (named `own`) may see them:
        when and whether refused, for everyone; who asked (user, pid, program) only for root
        and for the user whose request it was.  The property (reader None) names nobody: it
        reads the same for every local user, and a user's processes are theirs to show
        (hidepid)."""
        return Variant("a(dsusb)", [
            [r.at, cut(r.user), r.pid, cut(r.program), refused]
            if reader == 0 or (own and r.user == own) else [r.at, "", 0, "", refused]
            for r, refused in self.daemon.who_asked.requests.recent()])

    # ---- announcements --------------------------------------------------------------------

    def _state_changed(self, ifname: str, state: str, reason: str) -> None:
        self.object.emit_signal("StateChanged", "sss", [ifname, state, cut(reason)])
        self._devices.flush()

    def _send_requests(self) -> None:
        self.object.emit_properties(["RecentScanRequests"], {"RecentScanRequests": self._requests()})

    def _send_devices(self) -> None:
        status = self.daemon.status()
        if status != self._devices_sent:
            self._devices_sent = status
            self.object.emit_properties(["Devices"], {"Devices": _devices(status)})

    # ---- who is calling -------------------------------------------------------------------

    async def _uid(self, sender: str) -> int:
        try:
            (uid,) = await call(self.bus, *DBUS, "GetConnectionUnixUser", "s", [sender])
        except BusError as e:
            raise CallError(ACCESS_DENIED, f"cannot tell who is calling ({e})") from None
        return int(uid)

    async def _authorize(self, msg: Message, uid: int, action: str, what: str) -> None:
        """Return if polkit allows `action` for the caller (root always may), else refuse."""
        if uid == 0:
            return
        interactive = bool(int(msg.flags) & ALLOW_INTERACTIVE_AUTHORIZATION)
        subject = ["system-bus-name", {"name": Variant("s", msg.sender)}]
        try:
            ((authorized, challenge, _details),) = await call(
                self.bus, *POLKIT, "CheckAuthorization", "(sa{sv})sa{ss}us",
                [subject, action, {}, 1 if interactive else 0, ""],
                timeout=POLKIT_INTERACTIVE_TIMEOUT if interactive else POLKIT_TIMEOUT)
        except BusError as e:
            log.warning("polkit could not be asked about %s (%s); refusing non-root callers", action, e)
            raise CallError(ERROR_NOT_READY, f"{what} needs polkit authorisation ({action}), but "
                            f"polkit did not answer ({e.name}); is polkitd installed and running? "
                            "root may always do this") from None
        if not authorized:
            if challenge:
                raise CallError(ACCESS_DENIED, f"{what} needs authentication (polkit action "
                                f"{action}); allow interactive authorisation or run as root")
            who = ("administrators may (polkit asks them for their password)"
                   if action == ACTION_RELOAD else
                   "active local sessions may, others need an administrator")
            raise CallError(ACCESS_DENIED, f"not authorised to {what} (polkit action {action} "
                            f"said no); {who}")

    # ---- methods --------------------------------------------------------------------------

    async def _hold(self, msg: Message) -> Message:
        reason, app_id, interface = msg.body
        hold: Hold | None = None
        try:
            check_text("reason", reason)
            check_text("application_id", app_id)
            uid = await self._uid(msg.sender)
            # No await between the caps' check and the count (reserve), so that concurrent calls
            # cannot race past a cap.  Until polkit answers, the call counts only against the
            # caps of waiting calls, not against the holds': an agent that never answers must not
            # keep other users from holding.  Root is never asked.
            with self.holds.reserve(msg.sender, uid, granted=uid == 0) as slot:
                # Watched before polkit is asked: a caller leaving meanwhile voids the
                # reservation (caller_left); until then the reservation keeps the caller watched
                # (callers()), whatever happens to its other holds.
                await self._watch(msg.sender)
                if not await self._has_owner(msg.sender):  # left before the watch was in place
                    raise CallError(ERROR_FAILED, "the caller left the bus before the hold was taken")
                if interface:
                    await self._check_interface(interface)
                await self._authorize(msg, uid, ACTION_HOLD, "suspend Wi-Fi background scanning")
                slot.grant()
                hold = slot.commit(reason, app_id, interface, time.time())
        except HoldError as e:
            raise CallError(_HOLD_ERRORS[e.kind], e.text) from None
        finally:
            # Any way out without a hold (the slot is given back by now): stop watching, unless
            # the caller holds or is taking another (callers() counts reservations).
            if hold is None:
                self._unwatch(msg.sender)
        log.info("hold %d taken by %s (uid %d, %s) on %s: %s", hold.cookie,
                 quoted(app_id) if app_id else "an application", uid, msg.sender,
                 interface or "every interface", quoted(reason, 80) if reason else "no reason given")
        return Message.new_method_return(msg, "u", [hold.cookie])

    async def _release(self, msg: Message) -> Message:
        (cookie,) = msg.body
        hold = self.holds.get(cookie)
        # Only a caller who is not the holder needs to be root; ask the bus only then.  The
        # holder giving up its own hold needs no polkit: refusing would only keep bgscan off.
        is_root = hold is not None and hold.caller != msg.sender and await self._uid(msg.sender) == 0
        try:
            hold = self.holds.release(cookie, msg.sender, is_root)
        except HoldError as e:
            raise CallError(_HOLD_ERRORS[e.kind], e.text) from None
        self._ended(hold, f"released by {'its holder' if hold.caller == msg.sender else 'root'}")
        self.object.emit_signal("HoldReleased", "u", [hold.cookie], destination=hold.caller)
        return Message.new_method_return(msg)

    async def _reload(self, msg: Message) -> Message:
        uid = await self._uid(msg.sender)
        await self._authorize(msg, uid, ACTION_RELOAD, "reload the scanguard configuration")
        try:
            await self.daemon.reload()
        except ConfigError as e:
            raise CallError(ERROR_BAD_CONFIG, f"{e}; the previous settings stay in force") from None
        return Message.new_method_return(msg)

    async def _device_event(self, msg: Message) -> Message:
        interface, action, uuid = msg.body
        if await self._uid(msg.sender) != 0:
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
        who = await self._reporter(msg, "ScanRequestDeferred", user, pid, program)
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
        who = await self._reporter(msg, "ScanRequestSeen", user, pid, program)
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
        self._recent_requests.poke()
        return Message.new_method_return(msg)

    async def _get_recent_scan_requests(self, msg: Message) -> Message:
        """RecentScanRequests with the caller's own requests named (every request for root)."""
        uid = await self._uid(msg.sender)
        # The passwd lookup can go to the network (NSS: LDAP, SSSD): off the event loop.
        own = await asyncio.get_running_loop().run_in_executor(None, user_name, uid) \
            if uid != 0 else ""
        return Message.new_method_return(msg, "a(dsusb)", [self._requests(uid, own).value])

    async def _reporter(self, msg: Message, method: str, user: str, pid: int, program: str) -> str:
        """Check that polkitd's helper (or root) reports, and that the texts are sane; the
        words naming who asked, for the log."""
        uid = await self._uid(msg.sender)
        if uid != 0 and uid != await asyncio.get_running_loop().run_in_executor(None, polkit_uid):
            raise CallError(ACCESS_DENIED, f"only polkitd's helper (user polkitd) or root may call "
                            f"{method}; it reports a Wi-Fi scan request the nm-scanguard "
                            "polkit rule saw")
        if len(user) > MAX_TEXT or len(program) > MAX_PROGRAM:
            raise CallError(INVALID_ARGS, f"user ({len(user)} characters) or program "
                            f"({len(program)}) is too long: at most {MAX_TEXT} and {MAX_PROGRAM}")
        who = f"user {quoted(user)}" if user else "a user"
        return who + (f" ({quoted(program) + ', ' if program else ''}pid {pid})" if pid else "")

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

    async def _has_owner(self, name: str) -> bool:
        try:
            return await name_has_owner(self.bus, name)
        except BusError:
            return False

    async def _watch(self, sender: str) -> None:
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

    def _unwatch(self, sender: str) -> None:
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

    def _on_signal(self, msg: Message) -> None:
        if (msg.message_type == MessageType.SIGNAL and msg.member == "NameOwnerChanged"
                and msg.sender == DBUS[0]):
            name, _old, new = msg.body
            if not new and name in self._watched:
                for hold in self.holds.caller_left(name):
                    self._ended(hold, "its holder left the bus")
                self._unwatch(name)

    def _ended(self, hold: Hold, why: str) -> None:
        log.info("hold %d (%s) %s", hold.cookie, quoted(hold.application_id) if hold.application_id
                 else hold.caller, why)
        self._unwatch(hold.caller)


def _owner_rule(name: str) -> str:
    return ("type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',"
            f"member='NameOwnerChanged',arg0='{name}'")


def wall_clock(uptime: float) -> float:
    """The wall-clock time of a moment given on the boot-time clock (/proc/uptime), or now
    when it is 0 (unknown) or lies ahead (a report cannot come from the future)."""
    if uptime <= 0.0:
        return time.time()
    ago = time.clock_gettime(time.CLOCK_BOOTTIME) - uptime
    return time.time() - max(0.0, ago)


_polkit_uid: int | None = None


def user_name(uid: int) -> str:
    """The name of user `uid` as polkit gives it (the first passwd entry), or "" if none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return ""


def polkit_uid() -> int | None:
    """polkitd's uid (None when the system has no such user).  Kept once found: a system
    user's uid does not change while it exists.  Not found is asked again next time, so that
    installing polkitd after the daemon started needs no restart."""
    global _polkit_uid
    if _polkit_uid is None:
        try:
            _polkit_uid = pwd.getpwnam(POLKIT_USER).pw_uid
        except KeyError:
            return None
    return _polkit_uid
