"""Per-connection settings: a NetworkManager profile's `scanguard.<key>` user data over the
global settings (config.py).  A bad profile value only falls back to the global value for that
key, with one warning per bad value, because a user's profile must never stop the service.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from .config import KEYS, USER_DATA_PREFIX, ConfigError, Settings, parse_value
from .text import NAME_CHARS, clipped, quoted

log = logging.getLogger(__name__)

# Every valid value is a short number or word; longer profile values are refused unread.
MAX_PROFILE_VALUE = 256
# At most this many bad keys of one profile are reported one by one; the rest in one line.
MAX_PROBLEMS_PER_PROFILE = 16


def _digest(*parts: str) -> bytes:
    import hashlib  # only bad profile data needs it: not loaded at start (daemon/entry.py)

    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.digest()


class ProfileWarnings:
    """Which bad profile values were already reported, so that each is logged once.

    apply_profile runs on every NetworkManager signal for every active device: without this a
    bad value would be logged again on every sync.  A value that changes (still bad) is reported
    again; a value that is fixed is forgotten, so breaking it again is reported again.  Memory is
    bounded: only digests are kept, at most `max_entries` of them, oldest profiles dropped first
    (a dropped profile is simply reported once more)."""

    def __init__(self, max_entries: int = 1024) -> None:
        self.max_entries = max_entries
        # digest of the profile name -> {problem key: digest of (value, message)}
        self._seen: OrderedDict[bytes, dict[str, bytes]] = OrderedDict()
        self._entries = 0

    def __len__(self) -> int:
        return self._entries

    def clear(self) -> None:
        self._seen.clear()
        self._entries = 0

    def report(self, profile: str, problems: Mapping[str, tuple[str, str]]) -> list[str]:
        """Log the messages of `problems` (key -> (value, message)) not yet logged for `profile`
        with that same value and message; forget the profile's other keys.  Returns what it
        logged."""
        name = _digest(profile)
        previous = self._seen.pop(name, {})
        self._entries -= len(previous)
        current: dict[str, bytes] = {}
        logged: list[str] = []
        for key, (value, message) in problems.items():
            seen = _digest(value, message)
            if len(current) < self.max_entries:
                current[key] = seen
            if previous.get(key) != seen:
                log.warning("%s", message)
                logged.append(message)
        if current:
            self._seen[name] = current
            self._entries += len(current)
            while self._entries > self.max_entries:
                _, dropped = self._seen.popitem(last=False)
                self._entries -= len(dropped)
        return logged


# The daemon's default memo; pass your own `warned=` to apply_profile to keep it apart.
PROFILE_WARNINGS = ProfileWarnings()
_CHECK = "(consistency)"  # problem keys that cannot clash with user data keys ("scanguard.…")
_MORE = "(more)"


def apply_profile(base: Settings, user_data: Mapping[str, str], profile: str, *,
                  warned: ProfileWarnings | None = None) -> Settings:
    """Overlay `scanguard.*` user data of one NM profile; bad values fall back with a warning.

    Each bad value is warned about once per profile (see ProfileWarnings), not on every call."""
    memo = PROFILE_WARNINGS if warned is None else warned
    where = f"NetworkManager profile {quoted(profile, NAME_CHARS)}"
    values: dict[str, Any] = {}
    problems: dict[str, tuple[str, str]] = {}
    bad: list[tuple[str, str]] = []
    for full_key, text in sorted(user_data.items()):
        if not full_key.startswith(USER_DATA_PREFIX):
            continue
        key = full_key[len(USER_DATA_PREFIX):]
        item = f"{where}: user data {clipped(full_key, NAME_CHARS)}"
        try:
            if key in KEYS and len(text) > MAX_PROFILE_VALUE:
                raise ConfigError(f"{item}: {key} = {quoted(text)} is too long (at most "
                                  f"{MAX_PROFILE_VALUE} characters); expected {KEYS[key].form}")
            values[key] = parse_value(key, text, item)
        except ConfigError as e:
            if len(problems) < MAX_PROBLEMS_PER_PROFILE:
                problems[full_key] = (text, f"{e}; using {_fallback(base, key)}")
            else:
                bad.append((full_key, text))
    if bad:
        problems[_MORE] = (_digest(*(part for pair in bad for part in pair)).hex(),
                           f"{where}: {len(bad)} more bad scanguard.* user data keys are ignored "
                           f"as well, from {clipped(bad[0][0], NAME_CHARS)} on")
    settings = base.with_values(values, f"profile {profile}")
    try:
        settings.check(where)
    except ConfigError as e:
        problems[_CHECK] = ("", f"{e}; ignoring this profile's scanguard settings")
        settings = base
    memo.report(profile, problems)
    return settings


def _fallback(base: Settings, key: str) -> str:
    if key in KEYS:
        return f"the value from {base.source(key)} ({getattr(base, key)})"
    return "nothing (the key is ignored)"
