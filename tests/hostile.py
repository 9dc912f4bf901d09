"""Text a peer could send to take over a terminal or disguise a line, and the check that none of
it reached printed output raw: ESC sequences, the C1 CSI, DEL, a carriage return, bidi overrides,
isolates and marks, zero-width characters, a language tag and letters that draw nothing."""

from __future__ import annotations

import unicodedata

CAFE = "Café ☕"
HOSTILE = ["\x1b[31m", "\x9b31m", "\x7f", "\r", "\u202e", "\u202a", "\u2066", "\u2069",
           "\u200e", "\u200f", "\u061c", "\u200b", "\ufeff", "\u2028", "\U000e0041",
           "\u3164", "\u115f", "\uffa0", "\u034f"]
# One string with all of them, between readable text that must stay readable.
EVIL = CAFE + "".join(HOSTILE) + "tail"

_KEPT_FORMAT = "\u200c\u200d"  # ZWNJ, ZWJ: scripts and emoji need them
_INVISIBLE = "\u3164\u115f\u1160\uffa0\u034f"


def raw_troublemakers(text: str) -> list[str]:
    """The characters of `text` that a terminal acts on or that hide: none may be printed raw."""
    return [c for c in text
            if (unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") and c not in _KEPT_FORMAT
                and c != "\n") or c in _INVISIBLE]
