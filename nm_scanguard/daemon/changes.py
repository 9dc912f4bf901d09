"""The daemon's one way to say that something changed.

The part that changes owns a Changes (the holds, a guard's state and figures, the daemon's for
the bus API); whoever wants to hear of it connects a callback, and calling the Changes runs
every callback with its arguments, in the order they were connected, before the call returns.
A callback that fails is handed to the owner's `failed` (by default: logged) and the others
still run: the change has happened, and one listener's bug must neither keep it from the others
nor make it look failed to the changer.  An owner with a status (a guard) shows it there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, ParamSpec

log = logging.getLogger("scanguard")

P = ParamSpec("P")


def _log(e: Exception, what: str) -> None:
    log.error("%s failed on hearing of a change", what, exc_info=e)


class Changes(Generic[P]):
    def __init__(self, failed: Callable[[Exception, str], None] = _log) -> None:
        """`failed(error, what)` hears of a callback that raised (`what` names it)."""
        self._callbacks: list[Callable[P, None]] = []
        self._failed = failed

    def connect(self, callback: Callable[P, None]) -> None:
        """Call `callback` on every change from now on, after those connected before it."""
        self._callbacks.append(callback)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Tell every callback of a change."""
        for callback in list(self._callbacks):
            try:
                callback(*args, **kwargs)
            except Exception as e:
                self._failed(e, f"{getattr(callback, '__qualname__', callback)} hearing of a change")
