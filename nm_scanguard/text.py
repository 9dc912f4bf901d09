"""A user's text in our messages, logs and status: one place for how it is cut and escaped.

Names and values come from people and from other programs (a profile called "Café ☕", a value
with a newline in it, 100 KB pasted by mistake): every message shows them the same way, and none
can split a log line or forge a second one.
"""

from __future__ import annotations

import unicodedata

# Echoed text (values, keys, names) is cut to this many characters in errors and log lines.
SHOWN_CHARS = 40
NAME_CHARS = 64
# A status text (the D-Bus Devices entry's reason and error) is cut to this many characters.
MAX_TEXT = 256

# ZWNJ/ZWJ are format characters that scripts and emoji need; every other control, format,
# separator, surrogate, private-use or unassigned character, and every space but " " (a no-break
# space is why "5 " is not a number), is shown as an escape.  Controls include ESC and the C1
# CSI (a terminal's escape sequences), formats the bidi overrides and isolates (U+202A-202E,
# U+2066-2069) that reorder what a terminal shows.
KEEP_FORMAT = frozenset({"\u200c", "\u200d"})
# Letters that draw nothing (the Hangul fillers) and the combining grapheme joiner: they pass
# as part of a name while showing nothing, so they are escaped as well.
INVISIBLE = frozenset({"\u034f", "\u115f", "\u1160", "\u3164", "\uffa0"})
_ESCAPED_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def escaped(char: str) -> bool:
    """Whether `char` is shown as an escape (a control, format, invisible or unusual space
    character); a backslash, which is shown doubled, is not counted."""
    category = unicodedata.category(char)
    return not (char == " " or char in KEEP_FORMAT or (category not in _ESCAPED_CATEGORIES
                                                       and category != "Zs"
                                                       and char not in INVISIBLE))


def _plain(text: str) -> bool:
    """Printable ASCII (" " to "~"), none of which is escaped: most text, checked at C speed
    (a status line and each Devices update show a dozen texts, every second while busy)."""
    return text.isascii() and text.isprintable()


def _escape(char: str) -> str:
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    if not escaped(char):
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def clipped(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text` made safe to echo: control characters escaped (a newline cannot split a log line or
    forge a second one) and cut to about `limit` characters, so a 100 KB value costs one short line.
    Non-ASCII text such as "Café ☕" or "5µ" is kept as it is."""
    if len(text) <= limit and _plain(text) and "\\" not in text:
        return text
    out: list[str] = []
    used = 0
    for char in text:
        piece = _escape(char)
        if used + len(piece) > limit:
            return "".join(out) + f"… ({len(text)} characters)"
        out.append(piece)
        used += len(piece)
    return "".join(out)


def one_line(text: str) -> str:
    """`text` with every character `clipped` would escape escaped, the rest (a backslash
    included) as it is: what the daemon's log handler applies to each message, so that no
    value that reached a log line unclipped can end it or forge the next.  Idempotent on
    `clipped` output, which has no such character left."""
    if _plain(text) or all(not escaped(char) for char in text):
        return text
    return "".join(_escape(char) if escaped(char) else char for char in text)


def quoted(text: str, limit: int = SHOWN_CHARS) -> str:
    """`clipped(text)` in single quotes, the form every message uses for a user's value."""
    return f"'{clipped(text, limit)}'"


def shown(value: object, limit: int = MAX_TEXT) -> str:
    """A peer's value as scanguardctl and diagnose print it to a person, and as the daemon logs
    one (a bgscan value read from wpa_supplicant): `clipped` at the length of a status text.
    The one way every name, reason, error or label that came from the daemon,
    NetworkManager, wpa_supplicant or another user reaches a terminal, so that none can move the
    cursor, recolour it or reorder the line; a value that should have been text but is not (a
    forged signal's) is shown as its str()."""
    return clipped(value if isinstance(value, str) else str(value), limit)


def cut(text: str, limit: int = MAX_TEXT) -> str:
    """`text` at most `limit` characters long, marked with "…" where it was cut."""
    return text if len(text) <= limit else text[:limit - 1] + "…"


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for a message ("a JSON array, not an object")."""
    names = {type(None): "null", bool: "boolean", int: "number", float: "number", str: "string",
             list: "array", dict: "object"}
    return names.get(type(value), type(value).__name__)
