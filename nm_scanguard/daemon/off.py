"""The administrator's off switch, `enabled = no` in the settings file.  The daemon keeps
running, since any call on the bus would start it again, and does nothing: every connection is
disabled whatever its profile says (Daemon.settings_for), each guard gives back what it
suspended and suspends, refuses and aborts nothing (policy.DISABLED), no hold is granted
(Api), and the Off property, `scanguardctl status` and `systemctl status` say so."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..config import Settings
from .guard.policy import off_reason

log = logging.getLogger("scanguard")


def status_line(settings: Settings, guards: Callable[[], str]) -> str:
    """The STATUS= line of `systemctl status scanguard`: that it is off, or the guards' line."""
    off = off_reason(settings)
    return f"nm-scanguard is off: {off}" if off else guards()


def say_switched(before: Settings | None, now: Settings) -> None:
    """Log the switch when a reload turns it (and at the start, `before` None, when off)."""
    was, off = off_reason(before) if before is not None else "", off_reason(now)
    if off == was:
        return
    if off:
        log.info("nm-scanguard is off: %s; it gives back every bgscan it suspended, refuses "
                 "and aborts no scan and grants no hold until that says yes and it is "
                 "reloaded", off)
    else:
        log.info("nm-scanguard is on again: the settings file no longer says enabled = no")
