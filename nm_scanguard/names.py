"""The names of our bus API and of the peers' well-known objects, declared once.

The daemon (daemon/api/methods.py, service.py), the peers' modules and scanguardctl use them; the XML next to
this file documents what names our API.
"""

from __future__ import annotations

BUS_NAME = "io.github.nm_scanguard.ScanGuard1"
PATH = "/io/github/nm_scanguard/ScanGuard1"
IFACE = BUS_NAME
ERROR = BUS_NAME + ".Error"

# Our own error names (documented in the XML).
ERROR_UNKNOWN_HOLD = ERROR + ".UnknownHold"
ERROR_TOO_MANY_HOLDS = ERROR + ".TooManyHolds"
ERROR_BAD_CONFIG = ERROR + ".BadConfig"
ERROR_NOT_READY = ERROR + ".NotReady"
ERROR_OFF = ERROR + ".Off"
ERROR_FAILED = ERROR + ".Failed"

# Standard error names we send or test for.
INVALID_ARGS = "org.freedesktop.DBus.Error.InvalidArgs"
ACCESS_DENIED = "org.freedesktop.DBus.Error.AccessDenied"
UNKNOWN_METHOD = "org.freedesktop.DBus.Error.UnknownMethod"
UNKNOWN_PROPERTY = "org.freedesktop.DBus.Error.UnknownProperty"
READ_ONLY = "org.freedesktop.DBus.Error.PropertyReadOnly"
# A peer that is not there, or did not answer: "is the service running?"
UNREACHABLE = (
    "org.freedesktop.DBus.Error.ServiceUnknown",
    "org.freedesktop.DBus.Error.NameHasNoOwner",
    "org.freedesktop.DBus.Error.NoReply",
    "org.freedesktop.DBus.Error.Timeout",
)

# (bus name, object path, interface) of the peers we call.
DBUS = ("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus")
POLKIT = ("org.freedesktop.PolicyKit1", "/org/freedesktop/PolicyKit1/Authority",
          "org.freedesktop.PolicyKit1.Authority")
NM = ("org.freedesktop.NetworkManager", "/org/freedesktop/NetworkManager",
      "org.freedesktop.NetworkManager")
WPAS = ("fi.w1.wpa_supplicant1", "/fi/w1/wpa_supplicant1", "fi.w1.wpa_supplicant1")

XML_NAME = BUS_NAME + ".xml"
XML_INSTALLED = "/usr/share/dbus-1/interfaces/" + XML_NAME

# polkit actions (systemd/io.github.nm_scanguard.policy)
ACTION_HOLD = "io.github.nm_scanguard.hold"
ACTION_RELOAD = "io.github.nm_scanguard.reload"
