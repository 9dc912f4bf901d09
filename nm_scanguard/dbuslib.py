"""One import point for the D-Bus library, chosen by what it does, not by its name.

dbus-fast is the maintained fork of dbus-next with the same names; Debian ships both.  Debian 12's
python3-dbus-fast 1.84.2 writes a string's length in characters instead of bytes, so the first
non-ASCII string it sends (a profile called "Café", a hold reason) makes dbus-daemon drop the
connection.  That is fixed in dbus-fast 2.x (Debian 13: 2.44.1).

How a library is chosen, cheapest check first, so that the daemon does not load a library it
then refuses (dbus-fast 1.84.2 stayed loaded on Debian 12: 2.1 MiB, issue 21):
1. A version known to be wrong (`BROKEN_BELOW`) is skipped without being imported; its version is
   read from the package's own __version__.py, without running the package (importlib.metadata
   would cost ~27 ms and 86 modules at every start).  tests/unit/shared/test_dbuslib_choice.py checks,
   on each release, that every installed version this rule refuses really marshals wrongly and
   every one it lets through marshals right: the rule is tied to the behaviour, not assumed.
2. The library is imported and marshals "é" once; one that gets it wrong anyway (a version we
   did not know about) is skipped then.
Each skip's reason is kept for the caller to log once: in `SKIPPED` when a person should hear
of it (a library asked for with SCANGUARD_DBUS_LIB, a version the rule did not know, one that
could not be checked), in `PASSED_OVER` when it is the expected case (Debian 12's dbus-fast,
installed beside dbus-next: not worth a warning at every start).  `describe()` names the
library in use and what was passed over, for a debug line.

Both libraries' package __init__ import their GLib main-loop integration, which imports gi and
GLib when python3-gi is installed (3.5 MiB; the daemon runs on asyncio and never uses it).  So
gi is made unimportable for the library's import alone, and only if nobody has loaded it yet:
the libraries treat GLib as optional (try/except ImportError in their glib modules) and their
GLib bus would say so if anyone used it.  gi itself stays importable afterwards: scanguardctl's
config verbs import it for libnm (profiles.py), and a broken python3-gi shows there.

SCANGUARD_DBUS_LIB=dbus_next (or dbus_fast) puts one library first, so that the test suite can
run against each; a library that fails the check is skipped even then.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import re
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from .bus_gate import Gate, GateSocket, GateStream

log = logging.getLogger(__name__)

PROBE = "é"  # two bytes in UTF-8: a correct marshaller writes length 2
KNOWN = ("dbus_fast", "dbus_next")
# Versions that write non-ASCII strings with a wrong length: below 2.0 for dbus-fast
# (docs/supported-releases.md).
BROKEN_BELOW: dict[str, tuple[int, ...]] = {"dbus_fast": (2,)}
WRONG_LENGTH = ("writes non-ASCII strings with a wrong length (the bus would drop the connection "
                "at the first 'é'); not using it")


def installed_version(name: str) -> str | None:
    """The version in package `name`'s __version__.py, read without importing the package;
    None if it is not installed or says no version."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for directory in spec.submodule_search_locations:
        try:
            with open(os.path.join(directory, "__version__.py"), encoding="utf-8") as f:
                text = f.read(4096)
        except OSError:
            continue
        found = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", text, re.MULTILINE)
        if found:
            return found[1]
    return None


def version_tuple(version: str) -> tuple[int, ...]:
    """Version text as numbers to compare: "1.84.2" -> (1, 84, 2); stops at the first part that
    is not a number ("2.0rc1" -> (2,))."""
    parts = []
    for part in version.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def known_broken(name: str, version: str | None) -> bool:
    """True if `version` of `name` is one that marshals non-ASCII strings wrongly."""
    floor = BROKEN_BELOW.get(name)
    if floor is None or version is None:
        return False
    parsed = version_tuple(version)
    return bool(parsed) and parsed < floor


def marshals_utf8(lib: str) -> bool:
    """True if `lib` writes the byte length of a non-ASCII string, as the D-Bus spec requires."""
    marshaller = importlib.import_module(lib + "._private.marshaller").Marshaller
    data = bytes(marshaller("s", [PROBE]).marshall())
    return data == len(PROBE.encode()).to_bytes(4, "little") + PROBE.encode() + b"\0"


@contextmanager
def without_gi() -> Iterator[None]:
    """While inside, `import gi` fails (ImportError), unless gi was loaded before."""
    hide = "gi" not in sys.modules
    if hide:
        sys.modules["gi"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if hide and sys.modules.get("gi", 0) is None:
            del sys.modules["gi"]


def _choose() -> tuple[str, ModuleType, list[str], list[str]]:
    """The library to use, its module, and the reasons others were skipped: (to warn about,
    expected)."""
    forced = os.environ.get("SCANGUARD_DBUS_LIB", "").strip()
    order = [forced] + [n for n in KNOWN if n != forced] if forced else list(KNOWN)
    skipped: list[str] = []
    passed_over: list[str] = []
    for name in order:
        version = installed_version(name)
        label = f"{name} {version or '(unknown version)'}"
        if known_broken(name, version):
            (skipped if name == forced else passed_over).append(f"{label} {WRONG_LENGTH}")
            continue
        try:
            with without_gi():
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
            skipped.append(f"{label} could not be checked ({e!r}); not using it")
            continue
        if not correct:
            skipped.append(f"{label} {WRONG_LENGTH}")
            continue
        return name, lib, skipped, passed_over
    reasons = skipped + passed_over
    raise ImportError(
        "nm-scanguard needs a D-Bus library that sends non-ASCII text correctly: "
        "python3-dbus-next, or python3-dbus-fast 2.x (Debian 13). "
        + ("; ".join(reasons) if reasons else "Neither is installed") + ". Install one with apt")


LIBRARY, _lib, SKIPPED, PASSED_OVER = _choose()


def describe() -> str:
    """The library in use with its version, and what was passed over and why."""
    text = f"using D-Bus library {LIBRARY} {installed_version(LIBRARY) or '(unknown version)'}"
    return text + "".join(f"; passed over: {why}" for why in PASSED_OVER)
_aio = importlib.import_module(LIBRARY + ".aio")
_introspection = importlib.import_module(LIBRARY + ".introspection")


class _EagainSafeSocket:
    """The bus socket as dbus-next 0.2.3's writer needs it.  Its write_callback sends queued
    messages in a loop on the non-blocking socket; a partial send makes it wait for the socket
    to be writable, but when the buffer is full exactly at a message boundary `send` raises
    BlockingIOError (EAGAIN) and the writer treats that as fatal: the connection is finalised
    and the daemon stops answering (a flood of holds fills the buffer that way).
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

    def _create_unmarshaller(self) -> Any:
        """dbus-next: every unmarshaller of this connection reads through one Gate
        (bus_gate.py), which drops a message longer than the cap before it is read."""
        unmarshaller = super()._create_unmarshaller()
        if getattr(unmarshaller, "sock", None) is None and hasattr(unmarshaller, "stream"):
            if getattr(self, "_gate_stream", None) is None:
                self._gate_stream = GateStream(Gate(self._sock), unmarshaller.stream)
            unmarshaller.stream = self._gate_stream
        return unmarshaller

    async def connect(self) -> MessageBus:
        why = gate_incoming(self)
        bus = await super().connect()
        _log_choice_once()
        if why is not None:
            _warn_once(f"D-Bus messages are not checked for size before they are read: {why}; "
                       "a local user can send the daemon a message large enough to take its "
                       "memory; report it with the D-Bus library's version")
        why = make_writer_eagain_safe(self)
        if why is not None:
            _warn_unsafe_writer(why)
        return bus  # type: ignore[no-any-return]


def gate_incoming(bus: Any) -> str | None:
    """Before connect(): the messages `bus` reads go through a Gate (bus_gate.py).  None if
    done, else why not.  Each library reads differently, and this reaches into private names
    (as make_writer_eagain_safe does): dbus-next gets its Gate in _create_unmarshaller above;
    dbus-fast 2.x hands the socket to its message reader when connecting, and the patched
    build_message_reader puts it behind a Gate.  (dbus-fast 1.x is never used: see BROKEN_BELOW.)"""
    if LIBRARY == "dbus_next":
        unmarshaller = getattr(bus, "_unmarshaller", None)
        if isinstance(getattr(unmarshaller, "stream", None), GateStream):
            return None
        return f"dbus-next's unmarshaller ({type(unmarshaller).__name__}) reads no stream"
    return _GATED_BUILDER


def _gate_dbus_fast_builder() -> str | None:
    """dbus-fast 2.x: its connect() calls build_message_reader(sock, ...) from its aio module;
    the socket it passes is put behind a Gate.  None if the patch is in place, else why not."""
    module = sys.modules.get("dbus_fast.aio.message_bus")
    build: Any = getattr(module, "build_message_reader", None)
    if build is None:
        return "dbus_fast.aio.message_bus has no build_message_reader"

    def gated(sock: Any, *rest: Any) -> Any:
        if isinstance(sock, socket.socket):
            sock = GateSocket(Gate(sock), sock)
        return build(sock, *rest)

    module.build_message_reader = gated  # type: ignore[union-attr]
    return None


def make_writer_eagain_safe(bus: Any) -> str | None:
    """Put _EagainSafeSocket under `bus`'s writer; None if done (or done before), else why not.
    It reaches into the library's private writer (`bus._writer.sock`), which a new version may
    rename or compile: then the patch cannot apply, and the caller must say so."""
    writer = getattr(bus, "_writer", None)
    if writer is None:
        return f"{LIBRARY}'s MessageBus has no _writer"
    sock = getattr(writer, "sock", None)
    if isinstance(sock, _EagainSafeSocket):
        return None
    if sock is None:
        return f"{LIBRARY}'s writer ({type(writer).__name__}) has no sock"
    try:
        writer.sock = _EagainSafeSocket(sock)
    except (AttributeError, TypeError) as e:  # a compiled writer with a typed slot
        return f"{LIBRARY}'s writer ({type(writer).__name__}) does not take another sock ({e})"
    return None


_warned_unsafe_writer = False
_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        log.warning("%s", message)


_GATED_BUILDER = _gate_dbus_fast_builder() if LIBRARY == "dbus_fast" else None
_logged_choice = False


def _log_choice_once() -> None:
    """At the first connection, once logging is set up (the choice is made at import, before
    it): which library, and what was passed over, as a debug line (`scanguardd -v`)."""
    global _logged_choice
    if not _logged_choice:
        _logged_choice = True
        log.debug("%s", describe())


def _warn_unsafe_writer(why: str) -> None:
    """Once per process: every connection would say the same."""
    global _warned_unsafe_writer
    if _warned_unsafe_writer:
        return
    _warned_unsafe_writer = True
    log.warning("D-Bus writer not protected against EAGAIN: %s.  A send that meets a full "
                "socket buffer exactly at a message boundary may then end the bus connection "
                "(the daemon exits with status 1 and systemd restarts it, restoring bgscan from "
                "its journal); report it with the D-Bus library's version", why)


BusType = _lib.BusType
Message = _lib.Message
MessageType = _lib.MessageType
MessageFlag = _lib.MessageFlag
Variant = _lib.Variant
DBusError = _lib.DBusError
introspection = _introspection

__all__ = [
    "LIBRARY", "SKIPPED", "PASSED_OVER", "describe", "MessageBus", "BusType", "Message",
    "MessageType", "MessageFlag",
    "Variant", "DBusError", "introspection", "marshals_utf8", "installed_version", "known_broken",
]
