"""The system-bus API: io.github.nm_scanguard.ScanGuard1 (see the XML next to this file).

Everything is served from one message handler rather than a ServiceInterface: Hold, Release,
Reload and DeviceEvent must know their caller's unique name, which neither dbus-next nor
dbus-fast passes to a @method.  The introspection XML is parsed at start-up and is the only
description of the interface: incoming calls are checked against its signatures and
Introspect returns it, so what is exported cannot drift from what is documented.

The daemon only counts holds per interface; who holds what, cookies and watching the holders
leave the bus live here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from . import __version__
from .bus import BusError, add_match, call, name_has_owner
from .config import ConfigError
from .dbuslib import Message, MessageBus, MessageType, Variant, introspection

if TYPE_CHECKING:
    from .daemon import Daemon

log = logging.getLogger("scanguard.api")

NAME = "io.github.nm_scanguard.ScanGuard1"
PATH = "/io/github/nm_scanguard/ScanGuard1"
IFACE = NAME
ERROR = NAME + ".Error"
XML_NAME = NAME + ".xml"
XML_INSTALLED = "/usr/share/dbus-1/interfaces/" + XML_NAME

INVALID_ARGS = "org.freedesktop.DBus.Error.InvalidArgs"
ACCESS_DENIED = "org.freedesktop.DBus.Error.AccessDenied"
UNKNOWN_METHOD = "org.freedesktop.DBus.Error.UnknownMethod"
UNKNOWN_PROPERTY = "org.freedesktop.DBus.Error.UnknownProperty"
READ_ONLY = "org.freedesktop.DBus.Error.PropertyReadOnly"

DBUS = ("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus")
POLKIT = ("org.freedesktop.PolicyKit1", "/org/freedesktop/PolicyKit1/Authority",
          "org.freedesktop.PolicyKit1.Authority")
ACTION_HOLD = "io.github.nm_scanguard.hold"
ACTION_RELOAD = "io.github.nm_scanguard.reload"

DEVICE_ACTIONS = ("up", "down", "pre-down", "reapply", "connectivity-change")
MAX_TEXT = 256
MAX_HOLDS_PER_CALLER = 64
DEVICES_EVERY = 1.0  # seconds between Devices PropertiesChanged while only figures change
POLKIT_TIMEOUT = 25.0
POLKIT_INTERACTIVE_TIMEOUT = 120.0  # a person may be typing a password
ALLOW_INTERACTIVE_AUTHORIZATION = 0x4  # message header flag

_IFNAME = re.compile(r"^[^/\s:]{1,15}$")

# D-Bus types of the Devices keys (documented in the XML).  Unknown keys are typed by value.
DEVICE_TYPES = {
    "interface": "s", "state": "s", "reason": "s", "since": "d", "rx_bps": "d", "tx_bps": "d",
    "pps": "d", "signal_dbm": "i", "suspended_bgscan": "s", "network": "s",
    "scans_guarding": "u", "scans_idle": "u", "connection_id": "s", "connection_uuid": "s",
    "error": "s", "settings": "a{sv}", "settings_sources": "a{ss}",
}


class CallError(Exception):
    """Becomes a D-Bus error reply: a name and a sentence a person can act on."""

    def __init__(self, name: str, text: str) -> None:
        super().__init__(text)
        self.name = name
        self.text = text


# ---- the canonical XML -------------------------------------------------------------------------

def xml_path() -> str:
    """The XML shipped in the package, or the copy installed for other programs."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), XML_NAME)
    return here if os.path.exists(here) else XML_INSTALLED


def load_interface() -> Any:
    """Our interface, parsed from the canonical XML (an introspection.Interface)."""
    with open(xml_path(), encoding="utf-8") as f:
        node = introspection.Node.parse(f.read())
    for iface in node.interfaces:
        if iface.name == IFACE:
            return iface
    raise RuntimeError(f"{xml_path()} does not declare interface {IFACE}")


def _standard_interfaces() -> list[Any]:
    I = introspection
    return [
        I.Interface("org.freedesktop.DBus.Properties", methods=[
            I.Method("Get", in_args=[I.Arg("s", name="interface_name"), I.Arg("s", name="property_name")],
                     out_args=[I.Arg("v", name="value")]),
            I.Method("GetAll", in_args=[I.Arg("s", name="interface_name")],
                     out_args=[I.Arg("a{sv}", name="properties")]),
            I.Method("Set", in_args=[I.Arg("s", name="interface_name"), I.Arg("s", name="property_name"),
                                     I.Arg("v", name="value")]),
        ], signals=[
            I.Signal("PropertiesChanged", args=[I.Arg("s", name="interface_name"),
                                                I.Arg("a{sv}", name="changed_properties"),
                                                I.Arg("as", name="invalidated_properties")]),
        ]),
        I.Interface("org.freedesktop.DBus.Introspectable", methods=[
            I.Method("Introspect", out_args=[I.Arg("s", name="xml_data")]),
        ]),
        I.Interface("org.freedesktop.DBus.Peer", methods=[
            I.Method("Ping"),
            I.Method("GetMachineId", out_args=[I.Arg("s", name="machine_uuid")]),
        ]),
    ]


# ---- holds ------------------------------------------------------------------------------------

@dataclass
class Hold:
    cookie: int
    reason: str
    application_id: str
    interface: str
    caller: str
    caller_uid: int
    since: float

    def as_dbus(self) -> dict[str, Variant]:
        return {
            "cookie": Variant("u", self.cookie), "reason": Variant("s", self.reason),
            "application_id": Variant("s", self.application_id),
            "interface": Variant("s", self.interface), "caller": Variant("s", self.caller),
            "caller_uid": Variant("u", self.caller_uid), "since": Variant("d", self.since),
        }


def _variant(value: Any, signature: str | None = None) -> Variant | None:
    """A status value as a Variant; None for a value that is unknown (the key is left out)."""
    if value is None:
        return None
    if signature is None:
        if isinstance(value, bool):
            signature = "b"
        elif isinstance(value, int):
            signature = "x"
        elif isinstance(value, float):
            signature = "d"
        elif isinstance(value, dict):
            signature = "a{sv}"
        else:
            signature, value = "s", str(value)
    if signature == "a{sv}":
        return Variant("a{sv}", {str(k): v for k, v in
                                 ((k, _variant(v)) for k, v in value.items()) if v is not None})
    if signature == "a{ss}":
        return Variant("a{ss}", {str(k): str(v) for k, v in value.items()})
    if signature in ("i", "u", "x"):
        value = int(round(value))
    elif signature == "d":
        value = float(value)
    elif signature == "s":
        value = str(value)
    return Variant(signature, value)


def device_as_dbus(status: dict[str, Any]) -> dict[str, Variant]:
    out = {}
    for key, value in status.items():
        v = _variant(value, DEVICE_TYPES.get(key))
        if v is not None:
            out[key] = v
    return out


# ---- the service ------------------------------------------------------------------------------

class Api:
    def __init__(self, daemon: "Daemon", bus: MessageBus) -> None:
        self.daemon = daemon
        self.bus = bus
        self.iface = load_interface()
        self.methods = {m.name: m for m in self.iface.methods}
        self.properties = {p.name: p for p in self.iface.properties}
        self.holds: dict[int, Hold] = {}
        self._watched: set[str] = set()  # callers whose NameOwnerChanged we subscribed to
        self._tasks: set[asyncio.Task] = set()
        self._devices_sent: Any = None
        self._devices_at = 0.0
        self._devices_timer: asyncio.TimerHandle | None = None
        self._handlers: dict[str, Callable[[Message], Awaitable[Message]]] = {
            "Hold": self._hold, "Release": self._release, "Reload": self._reload,
            "DeviceEvent": self._device_event,
        }

    async def start(self) -> None:
        self.bus.add_message_handler(self._on_message)
        self.daemon.on_state_changed.append(self._state_changed)
        self.daemon.on_changed.append(self._changed)
        await self._request_name()

    async def _request_name(self) -> None:
        try:
            (result,) = await call(self.bus, *DBUS, "RequestName", "su", [NAME, 0x4])  # DO_NOT_QUEUE
        except BusError as e:
            if e.name == ACCESS_DENIED:
                raise SystemExit(
                    f"scanguardd: the system bus does not let this user own {NAME} ({e.text}). "
                    "Run it as user 'scanguard' (systemctl start scanguard) or install "
                    f"/usr/share/dbus-1/system.d/{NAME}.conf") from None
            raise SystemExit(f"scanguardd: cannot own {NAME} on the system bus: {e}") from None
        if result not in (1, 4):  # PRIMARY_OWNER, ALREADY_OWNER
            raise SystemExit(
                f"scanguardd: {NAME} is already owned by another process: another scanguardd "
                "is running (systemctl status scanguard). Stop it first")
        log.debug("owning %s", NAME)

    # ---- dispatch -------------------------------------------------------------------------

    def _on_message(self, msg: Message) -> Message | bool | None:
        try:
            return self._dispatch(msg)
        except Exception:  # never let the library turn this into a traceback on the bus
            log.exception("unexpected error handling %s.%s", msg.interface, msg.member)
            if msg.message_type == MessageType.METHOD_CALL:
                return Message.new_error(msg, ERROR + ".Failed",
                                         "internal error in scanguardd; see its log "
                                         "(journalctl -u scanguard)")
            return None

    def _dispatch(self, msg: Message) -> Message | bool | None:
        if msg.message_type == MessageType.SIGNAL:
            if msg.member == "NameOwnerChanged" and msg.sender == "org.freedesktop.DBus":
                name, _old, new = msg.body
                if not new and name in self._watched:
                    self._caller_left(name)
            return None
        if msg.message_type != MessageType.METHOD_CALL:
            return None
        if msg.interface == "org.freedesktop.DBus.Introspectable" and msg.member == "Introspect":
            if msg.path == PATH:
                return Message.new_method_return(msg, "s", [self.introspect()])
            if PATH.startswith(msg.path.rstrip("/") + "/"):  # lets `busctl tree` find us
                child = PATH[len(msg.path.rstrip("/")) + 1:].split("/")[0]
                return Message.new_method_return(msg, "s", [_parent_node(child)])
            return None
        if msg.path != PATH:
            return None
        if msg.interface == "org.freedesktop.DBus.Properties":
            return self._properties(msg)
        if msg.interface not in (IFACE, None):
            return None  # Peer and anything unknown: the library answers
        method = self.methods.get(msg.member)
        if method is None:
            return Message.new_error(msg, UNKNOWN_METHOD, f"{IFACE} has no method {msg.member}; "
                                     "see /usr/share/dbus-1/interfaces/" + XML_NAME)
        expected = "".join(a.signature for a in method.in_args)
        if msg.signature != expected:
            return Message.new_error(msg, INVALID_ARGS, f"{msg.member} takes ({expected}), "
                                     f"not ({msg.signature})")
        self._spawn(self._answer(msg, self._handlers[msg.member]))
        return True

    async def _answer(self, msg: Message, handler: Callable[[Message], Awaitable[Message]]) -> None:
        try:
            reply = await handler(msg)
        except CallError as e:
            log.info("%s from %s refused: %s", msg.member, msg.sender, e.text)
            reply = Message.new_error(msg, e.name, e.text)
        except Exception:
            log.exception("unexpected error in %s", msg.member)
            reply = Message.new_error(msg, ERROR + ".Failed", f"{msg.member} failed inside "
                                      "scanguardd; see its log (journalctl -u scanguard)")
        if not int(msg.flags) & 0x1:  # NO_REPLY_EXPECTED
            self.bus.send(reply)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def introspect(self) -> str:
        node = introspection.Node(PATH, interfaces=[self.iface, *_standard_interfaces()])
        return node.tostring()

    # ---- properties -----------------------------------------------------------------------

    def _properties(self, msg: Message) -> Message:
        if msg.member == "GetAll" and msg.signature == "s":
            if msg.body[0] not in (IFACE, ""):
                return Message.new_method_return(msg, "a{sv}", [{}])
            return Message.new_method_return(msg, "a{sv}", [self.property_values()])
        if msg.member == "Get" and msg.signature == "ss":
            iface, name = msg.body
            if iface not in (IFACE, "") or name not in self.properties:
                return Message.new_error(msg, UNKNOWN_PROPERTY, f"{IFACE} has no property {name}")
            return Message.new_method_return(msg, "v", [self.property_values()[name]])
        if msg.member == "Set" and msg.signature == "ssv":
            return Message.new_error(msg, READ_ONLY, "every property of nm-scanguard is read-only; "
                                     "use Hold/Release, or scanguardctl config set")
        return Message.new_error(msg, INVALID_ARGS, f"no Properties.{msg.member}({msg.signature})")

    def property_values(self) -> dict[str, Variant]:
        return {
            "Version": Variant("s", __version__),
            "Devices": self._devices(),
            "ActiveHolds": Variant("aa{sv}", [h.as_dbus() for h in self.holds.values()]),
        }

    def _devices(self) -> Variant:
        return Variant("aa{sv}", [device_as_dbus(d) for d in self.daemon.status()])

    def _emit_properties(self, names: list[str]) -> None:
        values = self.property_values()
        self.bus.send(Message.new_signal(PATH, "org.freedesktop.DBus.Properties", "PropertiesChanged",
                                         "sa{sv}as", [IFACE, {n: values[n] for n in names}, []]))
        if "Devices" in names:
            self._devices_sent = self.daemon.status()
            self._devices_at = time.monotonic()

    # ---- signals from the daemon ----------------------------------------------------------

    def _state_changed(self, ifname: str, state: str, reason: str) -> None:
        self.bus.send(Message.new_signal(PATH, IFACE, "StateChanged", "sss", [ifname, state, reason]))
        self._flush_devices()

    def _changed(self) -> None:
        """Called on every sample; announce Devices at most every DEVICES_EVERY seconds."""
        if self._devices_timer is not None:
            return
        wait = self._devices_at + DEVICES_EVERY - time.monotonic()
        if wait <= 0:
            self._flush_devices()
        else:
            self._devices_timer = asyncio.get_running_loop().call_later(wait, self._flush_devices)

    def _flush_devices(self) -> None:
        if self._devices_timer is not None:
            self._devices_timer.cancel()
            self._devices_timer = None
        if self.daemon.status() != self._devices_sent:
            self._emit_properties(["Devices"])

    # ---- who is calling -------------------------------------------------------------------

    async def _uid(self, sender: str) -> int:
        try:
            (uid,) = await call(self.bus, *DBUS, "GetConnectionUnixUser", "s", [sender])
        except BusError as e:
            raise CallError(ACCESS_DENIED, f"cannot tell who is calling ({e})") from None
        return int(uid)

    async def _authorize(self, msg: Message, action: str, what: str) -> int:
        """The caller's uid if polkit allows `action` for it (root always may)."""
        uid = await self._uid(msg.sender)
        if uid == 0:
            return uid
        interactive = bool(int(msg.flags) & ALLOW_INTERACTIVE_AUTHORIZATION)
        subject = ["system-bus-name", {"name": Variant("s", msg.sender)}]
        try:
            ((authorized, challenge, _details),) = await call(
                self.bus, *POLKIT, "CheckAuthorization", "(sa{sv})sa{ss}us",
                [subject, action, {}, 1 if interactive else 0, ""],
                timeout=POLKIT_INTERACTIVE_TIMEOUT if interactive else POLKIT_TIMEOUT)
        except BusError as e:
            log.warning("polkit could not be asked about %s (%s); refusing non-root callers", action, e)
            raise CallError(ERROR + ".NotReady", f"{what} needs polkit authorisation ({action}), but "
                            f"polkit did not answer ({e.name}); is polkitd installed and running? "
                            "root may always do this") from None
        if not authorized:
            if challenge:
                raise CallError(ACCESS_DENIED, f"{what} needs authentication (polkit action "
                                f"{action}); allow interactive authorisation or run as root")
            raise CallError(ACCESS_DENIED, f"not authorised to {what} (polkit action {action} "
                            "said no); active local sessions may, others need an administrator")
        return uid

    async def _require_root(self, msg: Message, what: str) -> None:
        if await self._uid(msg.sender) != 0:
            raise CallError(ACCESS_DENIED, f"only root may call {what}; it is meant for the "
                            "NetworkManager dispatcher script")

    # ---- methods --------------------------------------------------------------------------

    async def _hold(self, msg: Message) -> Message:
        reason, app_id, interface = msg.body
        _check_text("reason", reason)
        _check_text("application_id", app_id)
        if interface:
            await self._check_interface(interface)
        mine = sum(1 for h in self.holds.values() if h.caller == msg.sender)
        if mine >= MAX_HOLDS_PER_CALLER:
            raise CallError(ERROR + ".TooManyHolds", f"this client already has {mine} holds; "
                            "release some (Release) before taking more")
        uid = await self._authorize(msg, ACTION_HOLD, "suspend Wi-Fi background scanning")
        await self._watch(msg.sender)
        if not await self._has_owner(msg.sender):
            self._unwatch(msg.sender)
            raise CallError(ERROR + ".Failed", "the caller left the bus before the hold was taken")
        cookie = 0
        while cookie == 0 or cookie in self.holds:
            cookie = secrets.randbits(32)
        self.holds[cookie] = Hold(cookie, reason, app_id, interface, msg.sender, uid, time.time())
        self.daemon.add_hold(interface)
        log.info("hold %d taken by %s (uid %d, %s) on %s: %s", cookie, app_id or "an application",
                 uid, msg.sender, interface or "every interface", reason or "no reason given")
        self._emit_properties(["ActiveHolds"])
        return Message.new_method_return(msg, "u", [cookie])

    async def _release(self, msg: Message) -> Message:
        (cookie,) = msg.body
        hold = self.holds.get(cookie)
        if hold is None:
            raise CallError(ERROR + ".UnknownHold", f"there is no hold with cookie {cookie} "
                            "(already released, or its holder left the bus)")
        if hold.caller != msg.sender and await self._uid(msg.sender) != 0:
            raise CallError(ACCESS_DENIED, f"hold {cookie} belongs to another client "
                            f"({hold.caller}); only it or root may release it")
        # The holder giving up its own hold needs no polkit: refusing would only keep bgscan off.
        if self.holds.pop(cookie, None) is not None:
            self._ended(hold, f"released by {'its holder' if hold.caller == msg.sender else 'root'}")
            self._emit_hold_released(hold)
        return Message.new_method_return(msg)

    async def _reload(self, msg: Message) -> Message:
        await self._authorize(msg, ACTION_RELOAD, "reload the scanguard configuration")
        try:
            await self.daemon.reload()
        except ConfigError as e:
            raise CallError(ERROR + ".BadConfig", f"{e}; the previous settings stay in force") from None
        return Message.new_method_return(msg)

    async def _device_event(self, msg: Message) -> Message:
        interface, action, uuid = msg.body
        await self._require_root(msg, "DeviceEvent")
        if action not in DEVICE_ACTIONS:
            raise CallError(INVALID_ARGS, f"action '{action}' is not one of {', '.join(DEVICE_ACTIONS)}")
        if interface or action != "connectivity-change":
            await self._check_interface(interface)
        log.debug("dispatcher: %s %s (connection %s)", interface or "-", action, uuid or "-")
        self.daemon.schedule_sync()  # a hint: sync() asks NetworkManager what is true
        return Message.new_method_return(msg)

    # ---- helpers --------------------------------------------------------------------------

    async def _check_interface(self, interface: str) -> None:
        if not _IFNAME.match(interface):
            raise CallError(INVALID_ARGS, f"'{interface}' is not a valid interface name")
        try:
            devices = await self.daemon.nm.wifi_devices()
        except BusError as e:
            log.debug("cannot check %s with NetworkManager (%s); accepting the name", interface, e)
            return
        names = sorted(d.ifname for d in devices if d.ifname)
        if interface not in names:
            raise CallError(INVALID_ARGS, f"NetworkManager knows no Wi-Fi interface '{interface}' "
                            f"(Wi-Fi interfaces: {', '.join(names) or 'none'}); "
                            "use \"\" for every Wi-Fi interface")

    async def _has_owner(self, name: str) -> bool:
        try:
            return await name_has_owner(self.bus, name)
        except BusError:
            return False

    async def _watch(self, sender: str) -> None:
        if sender not in self._watched:
            self._watched.add(sender)
            await add_match(self.bus, _owner_rule(sender))

    def _unwatch(self, sender: str) -> None:
        if sender in self._watched and not any(h.caller == sender for h in self.holds.values()):
            self._watched.discard(sender)
            self._spawn(self._remove_match(_owner_rule(sender)))

    async def _remove_match(self, rule: str) -> None:
        try:
            await call(self.bus, *DBUS, "RemoveMatch", "s", [rule])
        except BusError as e:
            log.debug("RemoveMatch failed: %s", e)

    def _caller_left(self, sender: str) -> None:
        gone = [h for h in self.holds.values() if h.caller == sender]
        for hold in gone:
            del self.holds[hold.cookie]
            self._ended(hold, "its holder left the bus")
        if gone:
            self._emit_properties(["ActiveHolds"])
        self._unwatch(sender)

    def _ended(self, hold: Hold, why: str) -> None:
        self.daemon.remove_hold(hold.interface)
        log.info("hold %d (%s) %s", hold.cookie, hold.application_id or hold.caller, why)
        self._unwatch(hold.caller)

    def _emit_hold_released(self, hold: Hold) -> None:
        self.bus.send(Message(destination=hold.caller, message_type=MessageType.SIGNAL, path=PATH,
                              interface=IFACE, member="HoldReleased", signature="u",
                              body=[hold.cookie]))
        self._emit_properties(["ActiveHolds"])


def _parent_node(child: str) -> str:
    return ('<!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"\n'
            ' "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">\n'
            f'<node>\n  <node name="{child}"/>\n</node>\n')


def _owner_rule(name: str) -> str:
    return ("type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',"
            f"member='NameOwnerChanged',arg0='{name}'")


def _check_text(what: str, text: str) -> None:
    if len(text) > MAX_TEXT:
        raise CallError(INVALID_ARGS, f"{what} is {len(text)} characters long; at most {MAX_TEXT}")
    if any(ord(c) < 0x20 for c in text):
        raise CallError(INVALID_ARGS, f"{what} must not contain control characters")


async def export(daemon: "Daemon", bus: MessageBus) -> Api:
    """Entry point used by daemon._serve(): serve the API and own the bus name."""
    api = Api(daemon, bus)
    await api.start()
    return api
