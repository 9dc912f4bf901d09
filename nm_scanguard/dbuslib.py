"""One import point for the D-Bus library.

dbus-fast is the maintained fork of dbus-next with the same names; Debian 12 ships both.
We prefer dbus-fast and fall back to dbus-next.  SCANGUARD_DBUS_LIB=dbus_next (or dbus_fast)
forces one, so the test suite can run against each.
"""

from __future__ import annotations

import importlib
import os

_forced = os.environ.get("SCANGUARD_DBUS_LIB", "").strip()
_candidates = [_forced] if _forced else ["dbus_fast", "dbus_next"]

for _name in _candidates:
    try:
        _lib = importlib.import_module(_name)
        _aio = importlib.import_module(_name + ".aio")
        _service = importlib.import_module(_name + ".service")
        _introspection = importlib.import_module(_name + ".introspection")
        break
    except ImportError:
        continue
else:  # pragma: no cover - depends on the machine
    raise ImportError(
        "nm-scanguard needs python3-dbus-fast or python3-dbus-next "
        f"(tried: {', '.join(_candidates)}); install one with apt"
    )

LIBRARY: str = _name
MessageBus = _aio.MessageBus
BusType = _lib.BusType
Message = _lib.Message
MessageType = _lib.MessageType
Variant = _lib.Variant
DBusError = _lib.DBusError
ServiceInterface = _service.ServiceInterface
method = _service.method
dbus_property = _service.dbus_property
signal = _service.signal
PropertyAccess = _lib.PropertyAccess
introspection = _introspection

__all__ = [
    "LIBRARY", "MessageBus", "BusType", "Message", "MessageType", "Variant", "DBusError",
    "ServiceInterface", "method", "dbus_property", "signal", "PropertyAccess", "introspection",
]
