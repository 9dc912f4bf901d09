"""An in-process message bus: what dbus-daemon does for the daemon, without sockets.

`SimBus` routes the D-Bus library's own `Message` objects between connections (`Conn`, which
offers the part of the library's `MessageBus` that scanguardd uses: call, send, message
handlers, connected, disconnect) and services written in Python (`Service`: the simulated
wpa_supplicant, NetworkManager and polkitd).  What a real bus guarantees and scanguardd relies
on is kept:
- messages arrive in the order sent (every hop takes the same LATENCY and hops are delivered
  first in, first out; a stalled service holds back its output in order);
- signals reach a connection only through its AddMatch rules (sender matched by the owner of a
  well-known name, arg0, interface, member, path), or as unicast;
- a connection or service that goes away releases its names (NameOwnerChanged) and every call
  still waiting for its answer gets `org.freedesktop.DBus.Error.NoReply` (a reply it sent before
  leaving is delivered, ahead of the NameOwnerChanged); calls to a name nobody owns
  get `ServiceUnknown`.
Replies are not marshalled: the simulation checks behaviour, and the D-Bus rungs check bytes.

Each connection carries an owner label in `OWNER` (a context variable): tasks created while a
connection's code runs belong to it, so a simulated SIGKILL can end exactly that process's
tasks (`SimBus.tasks_of`).
"""

from __future__ import annotations

import asyncio
import contextvars
import re
from collections import deque
from typing import Any, Callable, Coroutine

from nm_scanguard.dbuslib import Message, MessageType, Variant

DBUS = "org.freedesktop.DBus"
DBUS_PATH = "/org/freedesktop/DBus"
NO_REPLY = DBUS + ".Error.NoReply"
SERVICE_UNKNOWN = DBUS + ".Error.ServiceUnknown"
UNKNOWN_METHOD = DBUS + ".Error.UnknownMethod"
NAME_HAS_NO_OWNER = DBUS + ".Error.NameHasNoOwner"

LATENCY = 0.0002  # seconds a message takes through the bus (dbus-daemon on a laptop: ~0.1 ms)

OWNER: contextvars.ContextVar[str] = contextvars.ContextVar("owner", default="world")

_RULE_ITEM = re.compile(r"(\w+)='([^']*)'")


def parse_rule(rule: str) -> dict[str, str]:
    return dict(_RULE_ITEM.findall(rule))


class Endpoint:
    """Anything with a unique name on the bus."""

    unique: str
    alive: bool
    uid: int

    def receive(self, msg: Message) -> None:
        raise NotImplementedError


class SimulatedCrash(BaseException):
    """The process died here: SIGKILL between the journal's write and its rename, or code the
    kill left scheduled reaching the bus (a killed process runs nothing more)."""


class Conn(Endpoint):
    """A client connection, as scanguardd's code sees its MessageBus."""

    def __init__(self, bus: SimBus, unique: str, uid: int, owner: str) -> None:
        self._bus = bus
        self.unique = self.unique_name = unique
        self.uid = uid
        self.owner = owner
        self.alive = True  # False once disconnected or killed
        self.dead = False  # its process was killed
        self.rules: list[dict[str, str]] = []
        self._handlers: list[Callable[[Message], Any]] = []
        self._replies: dict[int, asyncio.Future[Message]] = {}
        self._serial = 0
        self._context = contextvars.copy_context()
        self._context.run(OWNER.set, owner)

    # ---- the MessageBus surface scanguardd uses -----------------------------------------

    @property
    def connected(self) -> bool:
        if self.dead:  # a killed process runs nothing more: what the kill left stops here
            raise SimulatedCrash()
        return self.alive

    def add_message_handler(self, handler: Callable[[Message], Any]) -> None:
        self._handlers.append(handler)

    def remove_message_handler(self, handler: Callable[[Message], Any]) -> None:
        if handler in self._handlers:
            self._handlers.remove(handler)

    def _stamp(self, msg: Message) -> Message:
        if not msg.serial:
            self._serial += 1
            msg.serial = self._serial
        msg.sender = self.unique
        return msg

    async def call(self, msg: Message) -> Message:
        if not self.alive:
            raise SimulatedCrash() if self.dead else EOFError("the bus connection is closed")
        self._stamp(msg)
        reply: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._replies[msg.serial] = reply
        self._bus.route(msg, self)
        try:
            return await reply
        finally:
            self._replies.pop(msg.serial, None)

    def send(self, msg: Message) -> None:
        if self.alive:
            self._bus.route(self._stamp(msg), self)

    def disconnect(self) -> None:
        self._bus.drop(self)

    def waiting(self) -> bool:
        """Whether a call of this connection still waits for its answer."""
        return bool(self._replies)

    async def wait_for_disconnect(self) -> None:
        while self.alive:
            await asyncio.sleep(1)

    # ---- delivery (what the library does with an incoming message) -----------------------

    def receive(self, msg: Message) -> None:
        if not self.alive:
            return
        self._context.run(self._process, msg)

    def _process(self, msg: Message) -> None:
        if msg.message_type in (MessageType.METHOD_RETURN, MessageType.ERROR):
            fut = self._replies.get(msg.reply_serial)
            if fut is not None and not fut.done():
                fut.set_result(msg)
            return
        handled = False
        for handler in list(self._handlers):
            result = handler(msg)
            if result:
                if isinstance(result, Message):
                    self.send(result)
                handled = True
                break
        if msg.message_type == MessageType.METHOD_CALL and not handled:
            if msg.interface == "org.freedesktop.DBus.Peer" and msg.member == "Ping":
                self.send(Message.new_method_return(msg))
            else:
                self.send(Message.new_error(msg, UNKNOWN_METHOD,
                                            f"{msg.interface}.{msg.member} not found"))

    def killed(self) -> None:
        """A killed process: no more deliveries, its calls are never answered."""
        self.alive, self.dead = False, True
        self._replies.clear()

    def lost(self) -> None:
        """The connection broke under a live process: its calls fail as the library's do."""
        self.alive = False
        for fut in self._replies.values():
            if not fut.done():
                fut.set_exception(EOFError("the bus connection was lost"))


class Service(Endpoint):
    """A peer written in Python: `handle(msg)` returns a reply, or None to answer later
    through `reply()`.  `hold_output` keeps what it sends in order until `release_output`."""

    def __init__(self, bus: SimBus, name: str, uid: int = 0) -> None:
        self.bus = bus
        self.name = name
        self.uid = uid
        self.unique = ""
        self.alive = False
        self._held: list[Message] | None = None

    def start(self) -> None:
        # Started again while it runs, it would answer under a new unique name while the
        # well-known one stays with the old: the bus would drop every reply (a model fault).
        assert not self.alive, f"{self.name} started while it already runs"
        self.bus.attach(self)

    def stop(self) -> None:
        self.bus.drop(self)

    def handle(self, msg: Message) -> Message | None:
        raise NotImplementedError

    def receive(self, msg: Message) -> None:
        if not self.alive or msg.message_type != MessageType.METHOD_CALL:
            return
        reply = self.handle(msg)
        if reply is not None:
            self.emit(reply)

    def emit(self, msg: Message) -> None:
        if not self.alive:
            return
        msg.sender = self.unique
        if self._held is not None:
            self._held.append(msg)
        else:
            self.bus.route(msg, self)

    def signal(self, path: str, interface: str, member: str, signature: str,
               body: list[Any]) -> None:
        self.emit(Message.new_signal(path, interface, member, signature, body))

    def hold_output(self) -> None:
        if self._held is None:
            self._held = []

    def release_output(self) -> None:
        held, self._held = self._held, None
        for msg in held or ():
            self.emit(msg)


class SimBus:
    """The bus daemon: names, match rules, routing, and its own org.freedesktop.DBus methods."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.endpoints: dict[str, Endpoint] = {}
        self.names: dict[str, str] = {}  # well-known name -> unique name
        self._next = 0
        # (callee unique, caller unique, serial) of calls not answered yet
        self._waiting: dict[tuple[str, str, int], None] = {}
        self._tasks: dict[str, set[asyncio.Task[Any]]] = {}
        self._queue: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        loop.set_task_factory(self._task_factory)

    # ---- processes and their tasks -------------------------------------------------------

    def _task_factory(self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any],
                      **kwargs: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **kwargs)
        context = kwargs.get("context")
        owner = context.get(OWNER) if context is not None else OWNER.get()
        tasks = self._tasks.setdefault(owner, set())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return task

    def tasks_of(self, owner: str) -> set[asyncio.Task[Any]]:
        return set(self._tasks.get(owner, ()))

    def run_as(self, owner: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        context = contextvars.copy_context()
        context.run(OWNER.set, owner)
        return self.loop.create_task(coro, context=context)

    # ---- joining and leaving -------------------------------------------------------------

    def _unique(self) -> str:
        self._next += 1
        return f":1.{self._next}"

    def connect(self, uid: int, owner: str) -> Conn:
        conn = Conn(self, self._unique(), uid, owner)
        self.endpoints[conn.unique] = conn
        self._owner_changed(conn.unique, "", conn.unique)
        return conn

    def attach(self, service: Service) -> None:
        service.unique = self._unique()
        service.alive = True
        self.endpoints[service.unique] = service
        self._owner_changed(service.unique, "", service.unique)
        self.request_name(service.name, service.unique)

    def drop(self, ep: Endpoint, killed: bool = False) -> None:
        """`ep` leaves: its names are released and its callers still waiting get NoReply."""
        if self.endpoints.get(ep.unique) is not ep:
            return
        del self.endpoints[ep.unique]
        if isinstance(ep, Conn):
            ep.killed() if killed else ep.lost()
        else:
            ep.alive = False
        # A reply it sent before leaving is on the bus ahead of its leaving (dbus-daemon reads
        # a connection's messages in order): that call is answered, not ended with NoReply.
        answered = {(args[0].destination, args[0].reply_serial) for fn, args in self._queue
                    if fn == self._route and args[1:] == (ep.unique,)
                    and args[0].message_type in (MessageType.METHOD_RETURN, MessageType.ERROR)}
        for (callee, caller, serial) in [k for k in self._waiting if k[0] == ep.unique
                                         and (k[1], k[2]) not in answered]:
            del self._waiting[(callee, caller, serial)]
            self._error_to(caller, serial, NO_REPLY,
                           "Message recipient disconnected from message bus without replying")
        for name in [n for n, u in self.names.items() if u == ep.unique]:
            del self.names[name]
            self._owner_changed(name, ep.unique, "")
        self._owner_changed(ep.unique, ep.unique, "")

    def request_name(self, name: str, unique: str) -> int:
        owner = self.names.get(name)
        if owner == unique:
            return 4  # already owner
        if owner is not None:
            return 3  # exists
        self.names[name] = unique
        self._owner_changed(name, "", unique)
        return 1

    def owner_of(self, name: str) -> str | None:
        if name.startswith(":"):
            return name if name in self.endpoints else None
        return self.names.get(name)

    # ---- routing --------------------------------------------------------------------------

    def route(self, msg: Message, sender: Endpoint) -> None:
        self._post(self._route, msg, sender.unique)

    def in_flight(self) -> bool:
        """Whether a message is on its way, or something it woke has yet to run."""
        return bool(self._queue) or bool(self.loop._ready)  # type: ignore[attr-defined]

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        """Every hop takes LATENCY, and hops are delivered strictly in the order posted."""
        self._queue.append((fn, args))
        self.loop.call_later(LATENCY, self._deliver_one)

    def _deliver_one(self) -> None:
        fn, args = self._queue.popleft()
        fn(*args)

    def _route(self, msg: Message, sender: str) -> None:
        kind = msg.message_type
        if kind == MessageType.METHOD_CALL:
            if msg.destination == DBUS:
                self._driver(msg)
                return
            target = self.owner_of(msg.destination or "")
            if target is None:
                self._error_to(sender, msg.serial, SERVICE_UNKNOWN,
                               f"The name {msg.destination} was not provided by any .service files")
                return
            self._waiting[(target, sender, msg.serial)] = None
            self.endpoints[target].receive(msg)
        elif kind in (MessageType.METHOD_RETURN, MessageType.ERROR):
            if self._waiting.pop((sender, msg.destination or "", msg.reply_serial), "gone") == "gone":
                return  # the caller's call was already ended (NoReply), or never was
            ep = self.endpoints.get(msg.destination or "")
            if ep is not None:
                ep.receive(msg)
        else:
            self._broadcast(msg, sender)

    def _broadcast(self, msg: Message, sender: str) -> None:
        if msg.destination:
            ep = self.endpoints.get(self.owner_of(msg.destination) or "")
            if ep is not None:
                ep.receive(msg)
            return
        for ep in list(self.endpoints.values()):
            if isinstance(ep, Conn) and any(self._matches(r, msg, sender) for r in ep.rules):
                ep.receive(msg)

    def _matches(self, rule: dict[str, str], msg: Message, sender: str) -> bool:
        for key, value in rule.items():
            if key == "type":
                if value != "signal":
                    return False
            elif key == "sender":
                if value != sender and self.owner_of(value) != sender:
                    return False
            elif key == "interface":
                if msg.interface != value:
                    return False
            elif key == "member":
                if msg.member != value:
                    return False
            elif key == "path":
                if msg.path != value:
                    return False
            elif key == "arg0":
                if not msg.body or msg.body[0] != value:
                    return False
        return True

    def _error_to(self, unique: str, serial: int, name: str, text: str) -> None:
        ep = self.endpoints.get(unique)
        if ep is not None:
            self._post(ep.receive, Message(
                message_type=MessageType.ERROR, reply_serial=serial, destination=unique,
                sender=DBUS, error_name=name, signature="s", body=[text]))

    def _owner_changed(self, name: str, old: str, new: str) -> None:
        msg = Message.new_signal(DBUS_PATH, DBUS, "NameOwnerChanged", "sss", [name, old, new])
        msg.sender = DBUS
        self._post(self._broadcast, msg, DBUS)

    # ---- org.freedesktop.DBus itself -----------------------------------------------------

    def _driver(self, msg: Message) -> None:
        caller = self.endpoints.get(msg.sender or "")
        if caller is None:
            return
        member, body = msg.member, msg.body

        def reply(signature: str = "", values: list[Any] | None = None) -> None:
            self._post(caller.receive, Message(
                message_type=MessageType.METHOD_RETURN, reply_serial=msg.serial,
                destination=caller.unique, sender=DBUS, signature=signature, body=values or []))

        if member == "AddMatch" and isinstance(caller, Conn):
            caller.rules.append(parse_rule(body[0]))
            reply()
        elif member == "RemoveMatch" and isinstance(caller, Conn):
            rule = parse_rule(body[0])
            if rule in caller.rules:
                caller.rules.remove(rule)
            reply()
        elif member == "NameHasOwner":
            reply("b", [self.owner_of(body[0]) is not None])
        elif member == "GetNameOwner":
            owner = self.owner_of(body[0])
            if owner is None:
                self._error_to(caller.unique, msg.serial, NAME_HAS_NO_OWNER,
                               f"Could not get owner of name '{body[0]}': no such name")
            else:
                reply("s", [owner])
        elif member == "GetConnectionUnixUser":
            target = self.endpoints.get(self.owner_of(body[0]) or "")
            if target is None:
                self._error_to(caller.unique, msg.serial, NAME_HAS_NO_OWNER,
                               f"Could not get UID of name '{body[0]}': no such name")
            else:
                reply("u", [target.uid])
        elif member == "RequestName":
            reply("u", [self.request_name(body[0], caller.unique)])
        elif member == "Ping":
            reply()
        else:
            self._error_to(caller.unique, msg.serial, UNKNOWN_METHOD, f"no {member} here")


def variant(signature: str, value: Any) -> Variant:
    return Variant(signature, value)
