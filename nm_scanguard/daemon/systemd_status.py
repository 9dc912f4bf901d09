"""What `systemctl status scanguard` shows: the STATUS= line sent with sd_notify, one entry per
interface (Guards.status_line), and that the daemon is stopping.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .throttle import Throttle

STATUS_EVERY = 5.0  # seconds between STATUS= updates while only the figures change


class SystemdStatus:
    def __init__(self, line: Callable[[], str]) -> None:
        self._line = line
        self._sent = ""
        self._throttle = Throttle(STATUS_EVERY, self._send)

    def changed(self, force: bool) -> None:
        """A state change (`force`) is sent at once; figures at most every STATUS_EVERY seconds
        (the line is not even formatted in between: this runs on every sample)."""
        if force:
            self._throttle.flush()
        else:
            self._throttle.poke()

    def _send(self) -> None:
        line = self._line()
        if line != self._sent:
            self._sent = line
            notify("STATUS=" + line)

    def stopped(self) -> None:
        self._throttle.cancel()
        notify("STOPPING=1\nSTATUS=stopped, bgscan restored")


def notify(message: str) -> None:
    if not os.environ.get("NOTIFY_SOCKET"):
        return
    import systemd.daemon  # only under systemd, after the start (daemon/entry.py)

    systemd.daemon.notify(message)
