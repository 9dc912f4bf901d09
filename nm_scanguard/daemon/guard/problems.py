"""What is wrong on one interface now, by kind: shown in its status, logged once per change.

Each kind is cleared by its own success: STEP by a clean sample (the interface, engaging,
releasing), SIGNAL by a signal poll that got an answer, UNEXPECTED (a bug: its traceback is
logged once per distinct error) by a sample that ran through, SETTINGS by the profile being
readable again (WifiDevice), COUNTERS by a counter read the kernel answered, ABORT (an
AbortScan that failed) by the next one wpa_supplicant answered, ROAM and CANDIDATES as
targeted.py says.  DEFERRAL (the scan-deferral file does not say what the guard wants) is
shown, not logged here: the daemon's ScanDeferral logged it once for every guard.
"""

from __future__ import annotations

import logging
import os
import traceback
from typing import Protocol

from ...text import clipped, cut

log = logging.getLogger("scanguard")

SETTINGS, STEP, SIGNAL, UNEXPECTED = "settings", "step", "signal", "unexpected"
COUNTERS = "counters"
ABORT = "abort"
DEFERRAL = "deferral"
ROAM = "roam"
CANDIDATES = "candidates"
KINDS = (SETTINGS, STEP, COUNTERS, SIGNAL, ROAM, CANDIDATES, ABORT, DEFERRAL, UNEXPECTED)  # the order shown
MAX_TRACEBACKS = 16  # distinct unexpected errors whose traceback is logged, per logger


def unexpected_line(e: BaseException, what: str) -> str:
    """One line for an error nobody foresaw: its type, text and where it was raised."""
    frame = traceback.extract_tb(e.__traceback__)[-1:]
    where = f" at {os.path.basename(frame[0].filename)}:{frame[0].lineno}" if frame else ""
    return (f"unexpected error {what}: {type(e).__name__}: {clipped(str(e), 120)}{where}; "
            "carrying on (please report it)")


def log_traceback_once(message: str, e: BaseException, seen: set[str]) -> bool:
    """Log `message` with the traceback if this error was not seen before (at most
    MAX_TRACEBACKS of them); whether it did."""
    if message in seen or len(seen) >= MAX_TRACEBACKS:
        return False
    seen.add(message)
    log.error("%s", message, exc_info=e)
    return True


class ProblemSink(Protocol):
    """Where a guard's helper reports what is wrong on its interface (a guard's Problems)."""

    def fail(self, message: str, kind: str = STEP) -> None: ...

    def clear(self, kind: str) -> None: ...

    def show(self, kind: str, message: str | None) -> None: ...


class Problems:
    """One interface's current problem of each kind, and the last one logged of each kind."""

    def __init__(self) -> None:
        self._shown: dict[str, str] = {}
        self._logged: dict[str, str] = {}
        self._tracebacks: set[str] = set()  # unexpected errors whose traceback was logged

    def __contains__(self, kind: str) -> bool:
        return kind in self._shown

    def fail(self, message: str, kind: str = STEP) -> None:
        """Show `message` as the problem of `kind`; log it unless it was the last one logged."""
        self._shown[kind] = message
        if message != self._logged.get(kind):
            log.warning("%s", message)
            self._logged[kind] = message

    def clear(self, kind: str) -> None:
        """The problem of `kind` is over: stop showing it, and log the next one again."""
        self._shown.pop(kind, None)
        self._logged.pop(kind, None)

    def show(self, kind: str, message: str | None) -> None:
        """Show `message` (None: nothing) as the problem of `kind`, logged elsewhere."""
        if message:
            self._shown[kind] = message
        else:
            self._shown.pop(kind, None)

    def unexpected(self, e: BaseException, what: str, ifname: str) -> None:
        """An error nobody foresaw (a bug): its traceback is logged the first time, then one
        line each time the problem changes; shown until a sample runs through."""
        message = f"{ifname}: {unexpected_line(e, what)}"
        if log_traceback_once(message, e, self._tracebacks):
            self._logged[UNEXPECTED] = message
        self.fail(message, UNEXPECTED)

    def text(self) -> str:
        """Every problem shown, in KINDS order, each cut to fit the status."""
        return "; ".join(cut(self._shown[k]) for k in KINDS if k in self._shown)
