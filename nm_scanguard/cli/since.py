"""`scanguardctl history --since WHEN`: the start of the time span, in the forms journalctl takes
most often (systemd.time(7)), read in local time.  Whatever else is refused with what to write
instead: a time that is silently misread would show the wrong day."""

from __future__ import annotations

import argparse
import datetime as dt
import re
import time
from typing import NamedTuple

from ..text import quoted

EXAMPLES = "today, yesterday, -1h, '2 hours ago', 2026-11-30, '2026-11-30 14:00' or 14:00"

# systemd.time(7)'s units for a time span, those a person writes for hours and days.
_UNITS = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86400),
    **dict.fromkeys(("w", "week", "weeks"), 7 * 86400),
}
_SPAN_PART = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)")
_CLOCK = re.compile(r"[0-9]{1,2}:[0-9]{2}(?::[0-9]{2})?")


class Since(NamedTuple):
    at: float  # seconds since the epoch
    words: str  # as the user wrote it


def _span(text: str) -> float | None:
    """Seconds in a span such as "1h", "1h 30min", "90" (seconds) or "2 hours"; None if
    `text` is not one."""
    total, pos = 0.0, 0
    text = text.strip()
    while pos < len(text):
        m = _SPAN_PART.match(text, pos)
        if m is None or (m.group(2) and m.group(2) not in _UNITS):
            return None
        total += float(m.group(1)) * _UNITS.get(m.group(2), 1)
        pos = m.end()
        if not m.group(2) and text[pos:].strip():
            return None  # a bare number is seconds, and only at the end
    return total if text else None


def _midnight(now: float, days_back: int) -> float:
    day = dt.datetime.fromtimestamp(now).date() - dt.timedelta(days=days_back)
    return dt.datetime.combine(day, dt.time()).timestamp()


def parse_since(text: str, now: float) -> float:
    """The moment `text` names, as seconds since the epoch; ValueError if it names none."""
    words = text.strip().lower()
    if words == "now":
        return now
    if words in ("today", "yesterday"):
        return _midnight(now, 0 if words == "today" else 1)
    if words.startswith("@"):
        return float(words[1:])  # ValueError for junk
    if words.startswith("-") or words.endswith(" ago"):
        span = _span(words[1:] if words.startswith("-") else words[:-4])
        if span is None:
            raise ValueError(text)
        return now - span
    if _CLOCK.fullmatch(words):
        clock = dt.time.fromisoformat(words.zfill(len(words) + (words.index(":") == 1)))
        return dt.datetime.combine(dt.datetime.fromtimestamp(now).date(), clock).timestamp()
    moment = dt.datetime.fromisoformat(text.strip())  # naive: local time
    return moment.timestamp()


def since_argument(text: str) -> Since:
    """--since's value (argparse type): a usage error names the value and the forms to use."""
    try:
        at = parse_since(text, time.time())
        if not -1e11 < at < 1e11:  # beyond year 5000 either way: not a time this journal has
            raise ValueError(text)
    except (ValueError, OverflowError, OSError):
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not a time: give e.g. {EXAMPLES} "
                                         "(local time)") from None
    return Since(at, text)
