"""One import point for the D-Bus library, chosen by what it does, not by its name.

dbus-fast is the maintained fork of dbus-next with the same names; Debian ships both.  Debian 12's
python3-dbus-fast 1.84.2 writes a string's length in characters instead of bytes, so the first
non-ASCII string it sends (a profile called "Café", a hold reason) makes dbus-daemon drop the
connection.  Each candidate therefore marshals "é" once at import; one that gets it wrong is
skipped and the reason kept in `SKIPPED`, for the caller to log once.

SCANGUARD_DBUS_LIB=dbus_next (or dbus_fast) puts one library first, so that the test suite can
run against each; a library that fails the check is skipped even then.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

PROBE = "é"  # two bytes in UTF-8: a correct marshaller writes length 2
KNOWN = ("dbus_fast", "dbus_next")


def _version(name: str) -> str:
    try:
        from importlib.metadata import version

        return version(name.replace("_", "-"))
    except Exception:  # metadata missing: the name alone still says which library
        return "(unknown version)"


def marshals_utf8(lib: str) -> bool:
    """True if `lib` writes the byte length of a non-ASCII string, as the D-Bus spec requires."""
    marshaller = importlib.import_module(lib + "._private.marshaller").Marshaller
    data = bytes(marshaller("s", [PROBE]).marshall())
    return data == len(PROBE.encode()).to_bytes(4, "little") + PROBE.encode() + b"\0"


def _choose() -> tuple[str, ModuleType, list[str]]:
    forced = os.environ.get("SCANGUARD_DBUS_LIB", "").strip()
    order = [forced] + [n for n in KNOWN if n != forced] if forced else list(KNOWN)
    skipped: list[str] = []
    for name in order:
        try:
            lib = importlib.import_module(name)
            for part in ("aio", "introspection"):
                importlib.import_module(f"{name}.{part}")
        except ImportError as e:
            if name == forced:
                skipped.append(f"{name} is not installed ({e})")
            continue
        try:
            correct = marshals_utf8(name)
        except Exception as e:  # a library whose internals moved: judge it by the error
            skipped.append(f"{name} {_version(name)} could not be checked ({e!r}); not using it")
            continue
        if not correct:
            skipped.append(
                f"{name} {_version(name)} writes non-ASCII strings with a wrong length "
                "(the bus would drop the connection at the first 'é'); not using it")
            continue
        return name, lib, skipped
    raise ImportError(
        "nm-scanguard needs a D-Bus library that sends non-ASCII text correctly: "
        "python3-dbus-next, or python3-dbus-fast 2.x (Debian 13). "
        + ("; ".join(skipped) if skipped else "Neither is installed") + ". Install one with apt")


LIBRARY, _lib, SKIPPED = _choose()
_aio = importlib.import_module(LIBRARY + ".aio")
_introspection = importlib.import_module(LIBRARY + ".introspection")


class _EagainSafeSocket:
    """The bus socket as dbus-next 0.2.3's writer needs it.  Its write_callback sends queued
    messages in a loop on the non-blocking socket; a partial send makes it wait for the socket
    to be writable, but when the buffer is full exactly at a message boundary `send` raises
    BlockingIOError (EAGAIN) and the writer treats that as fatal: the connection is finalised
    and the daemon stops answering (found by the fault-injection suite under a hold flood).
    Reporting 0 bytes sent instead makes the writer wait for the socket, as it does for a
    partial send."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock

    def send(self, data: Any, *args: Any) -> int:
        try:
            return int(self._sock.send(data, *args))
        except BlockingIOError:
            return 0

    def sendmsg(self, *args: Any) -> int:
        try:
            return int(self._sock.sendmsg(*args))
        except BlockingIOError:
            return 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _retrieve(fut: Any) -> None:
    """Done-callback of a send nobody awaits: mark its exception as seen."""
    if not fut.cancelled():
        fut.exception()


def quiet(fut: Any) -> Any:
    """`fut` (a send's future), its failure marked as seen once it fails; returned as is."""
    if hasattr(fut, "add_done_callback"):
        fut.add_done_callback(_retrieve)
    return fut


class MessageBus(_aio.MessageBus):  # type: ignore[misc,name-defined]
    """The library's asyncio MessageBus, with its writer made safe against EAGAIN, and sends
    that nobody awaits (signals, replies: export.py) kept quiet when the connection is gone."""

    def send(self, msg: Any) -> Any:
        """The library's send.  Its future fails when the socket breaks under the message
        (EPIPE while the daemon disconnects at stop, or a bus that went away); for a signal or
        a reply nobody awaits that future, and asyncio would log "Future exception was never
        retrieved" with a traceback in the journal (seen once in the package VM at `systemctl
        stop`).  The lost connection itself is handled where it matters (service.py exits on a
        lost bus); a caller that awaits the future still gets the exception."""
        return quiet(super().send(msg))

    async def connect(self) -> "MessageBus":
        bus = await super().connect()
        writer = getattr(self, "_writer", None)
        if writer is not None and not isinstance(getattr(writer, "sock", None), _EagainSafeSocket):
            try:
                writer.sock = _EagainSafeSocket(writer.sock)
            except (AttributeError, TypeError):  # a compiled writer with a typed slot: its own code
                pass
        return bus  # type: ignore[no-any-return]


BusType = _lib.BusType
Message = _lib.Message
MessageType = _lib.MessageType
MessageFlag = _lib.MessageFlag
Variant = _lib.Variant
DBusError = _lib.DBusError
introspection = _introspection

__all__ = [
    "LIBRARY", "SKIPPED", "MessageBus", "BusType", "Message", "MessageType", "MessageFlag",
    "Variant", "DBusError", "introspection", "marshals_utf8",
]
