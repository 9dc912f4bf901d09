"""Serve one D-Bus object from its introspection XML, with plain message handlers.

Neither dbus-next nor dbus-fast passes a @method its caller's unique name, and our methods need
it (holds belong to their caller), so the object is served from a message handler.  The
interface is parsed from the canonical XML and is the only description of it: incoming calls
are checked against its signatures, Introspect returns it, Properties serves what the owner
provides.  The domain (what the methods do, who may call them) lives with the owner (methods.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ...dbuslib import Message, MessageBus, MessageType, Variant, introspection
from ...names import ERROR_FAILED, INVALID_ARGS, READ_ONLY, UNKNOWN_METHOD, UNKNOWN_PROPERTY
from ..guard.problems import log_traceback_once, unexpected_line

log = logging.getLogger("scanguard.api")

NO_REPLY_EXPECTED = 0x1  # message header flag
REFUSALS_EVERY = 60.0  # seconds: each sender's first refused call in such a window is logged
REFUSAL_SENDERS = 64  # senders remembered per window: the most refusal lines a window logs
SUMMARY_NAMES = 3  # senders a summary names, those with the most calls not logged

Handler = Callable[[Message], Awaitable[Message]]


class CallError(Exception):
    """Becomes a D-Bus error reply: a name and a sentence a person can act on."""

    def __init__(self, name: str, text: str) -> None:
        super().__init__(text)
        self.name = name
        self.text = text


def load_interface(xml_file: str, name: str) -> Any:
    """Interface `name`, parsed from `xml_file` (an introspection.Interface)."""
    with open(xml_file, encoding="utf-8") as f:
        node = introspection.Node.parse(f.read())
    for iface in node.interfaces:
        if iface.name == name:
            return iface
    raise RuntimeError(f"{xml_file} does not declare interface {name}")


def standard_interfaces() -> list[Any]:
    """Properties, Introspectable and Peer, as every object exports them."""
    intro = introspection

    def arg(sig: str, name: str) -> Any:
        return intro.Arg(sig, name=name)

    return [
        intro.Interface("org.freedesktop.DBus.Properties", methods=[
            intro.Method("Get", in_args=[arg("s", "interface_name"), arg("s", "property_name")],
                         out_args=[arg("v", "value")]),
            intro.Method("GetAll", in_args=[arg("s", "interface_name")],
                         out_args=[arg("a{sv}", "properties")]),
            intro.Method("Set", in_args=[arg("s", "interface_name"), arg("s", "property_name"),
                                         arg("v", "value")]),
        ], signals=[
            intro.Signal("PropertiesChanged", args=[arg("s", "interface_name"),
                                                    arg("a{sv}", "changed_properties"),
                                                    arg("as", "invalidated_properties")]),
        ]),
        intro.Interface("org.freedesktop.DBus.Introspectable", methods=[
            intro.Method("Introspect", out_args=[arg("s", "xml_data")]),
        ]),
        intro.Interface("org.freedesktop.DBus.Peer", methods=[
            intro.Method("Ping"),
            intro.Method("GetMachineId", out_args=[arg("s", "machine_uuid")]),
        ]),
    ]


def parent_node(child: str) -> str:
    """Introspection data of an object that only leads to `child` (lets `busctl tree` find us)."""
    return ('<!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"\n'
            ' "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">\n'
            f'<node>\n  <node name="{child}"/>\n</node>\n')


class Cancellable(Protocol):
    def cancel(self) -> None: ...


def _call_later(delay: float, callback: Callable[[], None]) -> Cancellable:
    return asyncio.get_running_loop().call_later(delay, callback)


class RefusalLog:
    """Logs refused calls without letting callers flood the journal.

    Any local user can make calls the daemon refuses, as fast as it likes; one line each would
    push the daemon past journald's rate limit (10,000 lines per 30 s by default), and journald
    would then drop the daemon's own errors too.  So, in each window of `every` seconds, the
    first refusal of each sender is logged, for at most `senders` senders; the others are only
    counted, and when the window ends one line says how many were not logged and who sent most.
    A window logs at most `senders` + 1 lines, however many connections a client opens, and
    the table never holds more than `senders` entries.
    """

    def __init__(self, every: float = REFUSALS_EVERY, senders: int = REFUSAL_SENDERS,
                 clock: Callable[[], float] = time.monotonic,
                 later: Callable[[float, Callable[[], None]], Cancellable] = _call_later) -> None:
        if every <= 0 or senders < 1:
            raise ValueError(f"every ({every}) must be positive and senders ({senders}) at least 1")
        self.every = every
        self.senders = senders
        self._clock = clock
        self._later = later
        self._window_end: float | None = None
        self._unlogged: dict[str, int] = {}  # sender -> its refusals not logged in this window
        self._untracked = 0  # refusals of senders beyond the table's cap, not logged
        self._timer: Cancellable | None = None

    def refused(self, member: str, sender: str, text: str) -> None:
        now = self._clock()
        if self._window_end is not None and now >= self._window_end:
            self.flush()
        if self._window_end is None:
            self._window_end = now + self.every
        if sender in self._unlogged:
            self._unlogged[sender] += 1
        elif len(self._unlogged) < self.senders:
            self._unlogged[sender] = 0
            log.info("%s from %s refused: %s", member, sender, text)
            return
        else:
            self._untracked += 1
        if self._timer is None:  # something waits to be summed up: it must not wait forever
            self._timer = self._later(max(0.0, self._window_end - now), self.flush)

    def flush(self) -> None:
        """End the window now: one line for the refusals it did not log, if there were any."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        unlogged = sum(self._unlogged.values()) + self._untracked
        if unlogged:
            most = sorted((-n, s) for s, n in self._unlogged.items() if n)
            who = [f"{-n} from {s}" for n, s in most[:SUMMARY_NAMES]]
            others = -sum(n for n, _ in most[SUMMARY_NAMES:])
            if others:
                who.append(f"{others} from other senders")
            if self._untracked:
                who.append(f"{self._untracked} from senders past the first {self.senders}")
            log.info("%d more refused call(s) in the last %.0f s were not logged one by one "
                     "(%s)", unlogged, self.every, ", ".join(who))
        self._window_end = None
        self._unlogged.clear()
        self._untracked = 0


class ExportedObject:
    """One object at `path` with interface `iface` (parsed from the XML), served from a
    message handler.  `methods` maps member names to async handlers that return the reply or
    raise CallError; `properties` returns every property's current Variant."""

    def __init__(self, bus: MessageBus, path: str, iface: Any,
                 methods: dict[str, Handler], properties: Callable[[], dict[str, Variant]],
                 error_hint: str = "") -> None:
        self.bus = bus
        self.path = path
        self.iface = iface
        self._methods = {m.name: m for m in iface.methods}
        self._properties = {p.name for p in iface.properties}
        self._handlers = methods
        self._values = properties
        self._hint = error_hint
        self._tasks: set[asyncio.Future[Any]] = set()
        self._refusals = RefusalLog()
        self._tracebacks: set[str] = set()  # unexpected errors whose traceback was logged
        self._unexpected: str | None = None  # the last one logged
        missing = set(self._methods) - set(methods)
        if missing:
            raise RuntimeError(f"no handler for {', '.join(sorted(missing))} of {iface.name}")

    def start(self) -> None:
        self.bus.add_message_handler(self._on_message)

    def close(self) -> None:
        self.bus.remove_message_handler(self._on_message)
        for task in list(self._tasks):
            task.cancel()
        self._refusals.flush()

    def introspect(self) -> str:
        node = introspection.Node(self.path, interfaces=[self.iface, *standard_interfaces()])
        return str(node.tostring())

    def emit_properties(self, names: list[str], values: dict[str, Variant] | None = None) -> None:
        """PropertiesChanged for `names`; `values` when the caller has them already (else every
        property is computed and the named ones sent)."""
        if values is None:
            values = self._values()
        self.bus.send(Message.new_signal(self.path, "org.freedesktop.DBus.Properties",
                                         "PropertiesChanged", "sa{sv}as",
                                         [self.iface.name, {n: values[n] for n in names}, []]))

    def emit_signal(self, member: str, signature: str, body: list[Any],
                    destination: str | None = None) -> None:
        """Broadcast, or unicast to `destination` (a signal only its holder should see)."""
        self.bus.send(Message(destination=destination, message_type=MessageType.SIGNAL,
                              path=self.path, interface=self.iface.name, member=member,
                              signature=signature, body=body))

    # ---- dispatch -------------------------------------------------------------------------

    def _on_message(self, msg: Message) -> Message | bool | None:
        if msg.message_type != MessageType.METHOD_CALL:
            return None
        try:
            return self._dispatch(msg)
        except Exception:  # never let the library turn this into a traceback on the bus
            log.exception("unexpected error handling %s.%s", msg.interface, msg.member)
            return Message.new_error(msg, ERROR_FAILED, "internal error" + self._hint)

    def _dispatch(self, msg: Message) -> Message | bool | None:
        if msg.interface == "org.freedesktop.DBus.Introspectable" and msg.member == "Introspect":
            if msg.path == self.path:
                return Message.new_method_return(msg, "s", [self.introspect()])
            parent = msg.path.rstrip("/") + "/"
            if self.path.startswith(parent):
                return Message.new_method_return(
                    msg, "s", [parent_node(self.path[len(parent):].split("/")[0])])
            return None
        if msg.path != self.path:
            return None
        if msg.interface == "org.freedesktop.DBus.Properties":
            return self._properties_call(msg)
        if msg.interface not in (self.iface.name, None):
            return None  # Peer and anything unknown: the library answers
        method = self._methods.get(msg.member)
        if method is None:
            return Message.new_error(msg, UNKNOWN_METHOD,
                                     f"{self.iface.name} has no method {msg.member}")
        expected = "".join(a.signature for a in method.in_args)
        if msg.signature != expected:
            return Message.new_error(msg, INVALID_ARGS, f"{msg.member} takes ({expected}), "
                                     f"not ({msg.signature})")
        task = asyncio.ensure_future(self._answer(msg, self._handlers[msg.member]))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _answer(self, msg: Message, handler: Handler) -> None:
        try:
            reply = await handler(msg)
        except CallError as e:
            self._refusals.refused(msg.member, msg.sender, e.text)
            reply = Message.new_error(msg, e.name, e.text)
        except Exception as e:
            # Once with its traceback per distinct error, then a line when it changes: a
            # caller who makes every call fail the same way must not fill the journal.
            message = unexpected_line(e, f"answering {msg.member}")
            if not log_traceback_once(message, e, self._tracebacks) \
                    and message != self._unexpected:
                log.warning("%s", message)
            self._unexpected = message
            reply = Message.new_error(msg, ERROR_FAILED, f"{msg.member} failed{self._hint}")
        if not int(msg.flags) & NO_REPLY_EXPECTED:
            self.bus.send(reply)

    def _properties_call(self, msg: Message) -> Message:
        name = self.iface.name
        if msg.member == "GetAll" and msg.signature == "s":
            if msg.body[0] not in (name, ""):
                return Message.new_method_return(msg, "a{sv}", [{}])
            return Message.new_method_return(msg, "a{sv}", [self._values()])
        if msg.member == "Get" and msg.signature == "ss":
            iface, prop = msg.body
            if iface not in (name, "") or prop not in self._properties:
                return Message.new_error(msg, UNKNOWN_PROPERTY,
                                         f"{name} has no property {prop[:64]!r}")
            return Message.new_method_return(msg, "v", [self._values()[prop]])
        if msg.member == "Set" and msg.signature == "ssv":
            return Message.new_error(msg, READ_ONLY, f"every property of {name} is read-only")
        return Message.new_error(msg, INVALID_ARGS,
                                 f"no Properties.{msg.member}({msg.signature})")
