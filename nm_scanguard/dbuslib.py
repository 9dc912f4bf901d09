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

MessageBus = _aio.MessageBus
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
