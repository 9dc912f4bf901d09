"""The daemon's one way to say that something changed.

The part that changes owns a Changes (the holds, a guard's state and figures, the daemon's for
the bus API); whoever wants to hear of it connects a callback, and calling the Changes runs
every callback with its arguments, in the order they were connected, before the call returns.
Every callback runs even if one before it fails: the change has happened.  What a failure then
does is the owner's choice, made once: a guard and the daemon (raises=True) get the first
failure raised after every callback ran, so that it shows where their own errors show (a
guard's step: the status's unexpected problem, logged once per change); the holds log it, so
that a hold that was taken never answers as failed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, ParamSpec

log = logging.getLogger("scanguard")

P = ParamSpec("P")


class Changes(Generic[P]):
    def __init__(self, raises: bool = False, logger: logging.Logger = log) -> None:
        """`raises`: raise a callback's failure to the changer once every callback ran;
        otherwise log it to `logger` (the owner's, so that the log names the part that changed)."""
        self._callbacks: list[Callable[P, None]] = []
        self._raises = raises
        self._log = logger

    def connect(self, callback: Callable[P, None]) -> None:
        """Call `callback` on every change from now on, after those connected before it."""
        self._callbacks.append(callback)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Tell every callback of a change."""
        first: Exception | None = None
        for callback in list(self._callbacks):
            try:
                callback(*args, **kwargs)
            except Exception as e:
                if not self._raises:
                    self._log.exception("%s failed on hearing of a change",
                                  getattr(callback, "__qualname__", callback))
                elif first is None:
                    first = e
        if first is not None:
            raise first
