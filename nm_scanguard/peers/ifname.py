"""What the kernel accepts as a network interface name.

A name we read back from a file (the crash journal) is handed to wpa_supplicant and shown in
logs; checking it against the kernel's own rules (`dev_valid_name()` in net/core/dev.c) means a
damaged or forged file cannot smuggle anything a real interface could not be called.  We are a
little stricter than the kernel where it only looks at ASCII: any Unicode whitespace and any
control character is refused, since no tool could print or type such a name sanely.

The one rule for every module: the journal, the bus API and netlink (which refuses to ask the
kernel about a name no interface can have) all use `valid_ifname`.
"""

from __future__ import annotations

import unicodedata

IFNAMSIZ = 16  # the kernel's buffer, including the terminating NUL: 15 bytes of name at most


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
