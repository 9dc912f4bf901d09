"""The values peers and files hand us, checked before anything is handed on: interface names
(the kernel's rules) and the shapes of wpa_supplicant's object paths and of the bgscan values
NetworkManager writes.  A check accepts the whole string or nothing ("wlan0\\n" is refused, not
trimmed).

Interface names: a name read back from a file (the crash journal) is handed to wpa_supplicant
and shown in logs; checking it against the kernel's own rules (`dev_valid_name()` in
net/core/dev.c) means a damaged or forged file cannot smuggle anything a real interface could
not be called.  We are a little stricter than the kernel where it only looks at ASCII: any
Unicode whitespace and any control character is refused, since no tool could print or type such
a name sanely.  The journal, the bus API and netlink (which refuses to ask the kernel about a
name no interface can have) all use `valid_ifname`.

Paths and bgscan values: what the crash journal and the bgscan core accept from a file or a
peer before handing it back to root's wpa_supplicant.
"""

from __future__ import annotations

import re
import unicodedata

IFNAMSIZ = 16  # the kernel's buffer, including the terminating NUL: 15 bytes of name at most

# wpa_supplicant names its objects with "%u" (dbus_new.c): decimal, no sign, no leading zeros.
_ID = r"(?:0|[1-9][0-9]{0,9})"
NETWORK_PATH = re.compile(rf"/fi/w1/wpa_supplicant1/Interfaces/{_ID}/Networks/{_ID}")
# Only what NetworkManager writes (nm-supplicant-config.c: "simple:30:-70:86400",
# "simple:30:-65:300") is kept: the simple module with its short interval, signal threshold
# (dBm, may be negative) and long interval, and the number of BSS transition queries that
# wpa_supplicant 2.11 reads from a fifth field.  Other modules take other parameters: learn's
# last one is the file it writes its database to.  At most 9 digits each, so that none
# overflows wpa_supplicant's atoi.
_N = r"[0-9]{1,9}"
BGSCAN = re.compile(rf"simple:{_N}:-?{_N}:{_N}(?::{_N})?")


def valid_network_path(path: object) -> bool:
    """True for a wpa_supplicant network object path such as
    /fi/w1/wpa_supplicant1/Interfaces/0/Networks/3 (the whole string, nothing more)."""
    return isinstance(path, str) and NETWORK_PATH.fullmatch(path) is not None


def valid_bgscan(value: object) -> bool:
    """True for a bgscan value of the form NetworkManager writes, "simple:30:-70:86400" (the
    whole string, nothing more).  "" is refused: an entry saving "" would restore nothing."""
    return isinstance(value, str) and BGSCAN.fullmatch(value) is not None


def interface_of(network: str) -> str:
    """The interface object a wpa_supplicant network object lies under
    (/fi/w1/wpa_supplicant1/Interfaces/0/Networks/3 -> /fi/w1/wpa_supplicant1/Interfaces/0)."""
    return network.rsplit("/Networks/", 1)[0]


def valid_ifname(name: str) -> bool:
    """True if `name` could be a Linux interface name: 1..15 bytes of UTF-8, not "." or "..",
    no "/", ":", whitespace, NUL or other control character.  The whole string must comply:
    "wlan0\\n" is refused, not trimmed."""
    if not isinstance(name, str):
        return False
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates: not text any kernel could have given us
        return False
    if not 0 < size < IFNAMSIZ or name in (".", ".."):
        return False
    return not any(
        ch in "/:" or ch.isspace() or unicodedata.category(ch) == "Cc" for ch in name
    )
