"""At most one update per interval, the last one never lost: for the bus API's signals and
sd_notify's STATUS= line alike."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class Throttle:
    """Runs `send` at most once per `interval` seconds: the first call at once, later ones
    coalesced into one run at the end of the interval, so the last state is never lost."""

    def __init__(self, interval: float, send: Callable[[], None]) -> None:
        self.interval = interval
        self._send = send
        self._last = float("-inf")
        self._timer: asyncio.TimerHandle | None = None

    def poke(self) -> None:
        if self._timer is not None:
            return
        wait = self._last + self.interval - time.monotonic()
        if wait <= 0:
            self.flush()
        else:
            self._timer = asyncio.get_running_loop().call_later(wait, self.flush)

    def flush(self) -> None:
        """Send now (a state change must not wait)."""
        self.cancel()
        self._last = time.monotonic()
        self._send()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
