"""The shapes of wpa_supplicant's object paths and of the bgscan values NetworkManager writes:
what the crash journal and the bgscan core accept from a file or a peer before handing it back
to root's wpa_supplicant."""

from __future__ import annotations

import re

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
