"""The scan-deferral file: whether other programs' Wi-Fi scan requests are refused now.

NetworkManager asks polkit whether a client may request a scan; the shipped rule
(systemd/50-nm-scanguard.rules) runs systemd/nm-scanguard-scan-deferral, which reads the file
this module writes.  See docs/scan-deferral.md.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat

from ..files import write_atomic

log = logging.getLogger("scanguard")


DEFER_FILE = "defer-scans"  # read by systemd/nm-scanguard-scan-deferral for the polkit rule


def _start_time() -> str:
    """This process's start time in clock ticks since boot (/proc/self/stat field 22): with
    the pid, it names this process and no later one that reuses the pid."""
    with open("/proc/self/stat", encoding="ascii", errors="replace") as f:
        return f.read().rsplit(")", 1)[1].split()[19]


class ScanDeferral:
    """Publishes whether other programs' Wi-Fi scan requests should be refused now.

    The shipped polkit rule cannot ask us over the bus (duktape rules cannot) and must answer
    fast, so its helper reads one small world-readable file: "defer PID STARTTIME" while any
    interface defers, "watch PID STARTTIME" while the daemon runs and does not defer (the helper
    allows the request and reports it, so that `scanguardctl diagnose` can name the program
    that asked), absent once the daemon has stopped.  The file lives in /run/scanguard, which
    survives a restart; so that a crashed or killed daemon cannot leave "defer" behind, it names
    this process and the helper checks that the process still runs (same pid, same start time).
    Written atomically (rename), so the helper never reads half a line."""

    def __init__(self, state_dir: str) -> None:
        self.path = os.path.join(state_dir, DEFER_FILE)
        self.active: bool | None = None  # None: unknown or cleared, write at the next set()
        # What the file on disk says for this process: True "defer", False "watch", None no
        # file of ours.  A write that fails leaves the file as it was (it is replaced whole).
        self.in_file: bool | None = None
        self.problem: str | None = None  # why the file does not say what was last asked
        self._stopped = False

    @property
    def in_force(self) -> bool:
        """Whether the polkit rule refuses other programs' scan requests now, as far as this
        process can tell: its own file says "defer"."""
        return self.in_file is True

    def set(self, defer: bool) -> None:
        """Defer (True) or only watch (False) from now on; nothing once cleared."""
        if defer == self.active or self._stopped:
            return
        try:
            self._write(f"{'defer' if defer else 'watch'} {os.getpid()} {_start_time()}\n")
        except OSError as e:
            if defer:
                effect = "are not refused"
            elif self.in_file:
                effect = "stay refused until it can be written or scanguardd stops"
            else:
                effect = "are allowed, but scanguardctl diagnose cannot name who asked for them"
            self._failed(f"{self.path}: cannot write ({e.strerror or e}), so other programs' "
                         f"Wi-Fi scan requests {effect}")
            return
        self.problem = None
        if defer != bool(self.active):
            log.debug("client Wi-Fi scan requests are %s", "refused" if defer else "allowed again")
        self.active = self.in_file = defer

    def clear(self) -> None:
        """The daemon stops: neither defer nor report any more (the guards' last changes while
        they stop do not write the file again)."""
        self._stopped = True
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        except OSError as e:
            problem = f"{self.path}: cannot remove ({e.strerror or e})"
            if self.in_file:
                self._failed(f"{problem}, so other programs' Wi-Fi scan requests stay refused "
                             "until this process has exited")
            else:  # "watch": the helper allows once this process has gone
                log.debug("%s; harmless: it names this process, which is ending", problem)
            return
        self.active = self.in_file = None

    def _failed(self, problem: str) -> None:
        if problem != self.problem:
            log.warning("%s; check that the directory exists and belongs to the service user",
                        problem)
            self.problem = problem
        self.active = None  # try again on the next change

    def _write(self, text: str) -> None:
        directory = os.path.dirname(self.path)
        # The unit creates it 0711; run by hand the daemon (or its journal, 0700) makes it, and
        # polkitd must still be able to reach this one file: search permission, no listing.
        os.makedirs(directory, mode=0o711, exist_ok=True)
        mode = stat.S_IMODE(os.stat(directory).st_mode)
        if not mode & stat.S_IXOTH:
            os.chmod(directory, mode | 0o011)
        write_atomic(self.path, text.encode("ascii"), mode=0o644,  # polkitd's helper reads it
                     durable=False)
