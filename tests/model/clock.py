"""Virtual time for the model rung: an asyncio event loop whose clock jumps instead of sleeping.

When nothing is ready to run, asyncio's loop asks its selector to wait until the next timer is
due.  Here the selector does not wait: it moves the loop's clock forward by that much and
returns.  So `asyncio.sleep(30)`, `asyncio.wait_for(..., 10)` and `loop.call_later` all take
no real time, and a minute of a guard's life runs in milliseconds.  The daemon's own calls to
`time.monotonic()` / `time.time()` are pointed at the same clock by `use_virtual_time` (the
modules keep their `import time`; the test swaps the name for a stand-in, nothing in the
daemon knows).

A loop with no timer and nothing ready would wait forever: that is a deadlock in the code under
test (or the simulation) and raises `Stalled`, with the time it happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import sys
import time as real_time
from types import ModuleType
from typing import Any, Iterator

EPOCH = 1_790_000_000.0  # what time.time() says at virtual time 0 (late 2026)


class Stalled(RuntimeError):
    """Nothing can ever run again: every task waits for something nobody will do."""


class _JumpingSelector(selectors.BaseSelector):
    """A real selector (for the loop's self-pipe) that never blocks: a wait becomes a jump."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        self._real = selectors.DefaultSelector()
        self._loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def get_map(self) -> Any:
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = self._real.select(0)
        if events:
            return events
        if timeout is None:
            raise Stalled(f"deadlock at virtual time {self._loop.time():.3f} s: no task can run "
                          "and no timer is pending")
        if timeout > 0:
            self._loop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._now = 0.0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


class _VirtualTimeModule(ModuleType):
    """Stands in for the `time` module inside the daemon's modules: monotonic() and time()
    read the running virtual loop; everything else is the real module's."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__("time")
        self._vloop = loop

    def monotonic(self) -> float:
        return self._vloop.time()

    def time(self) -> float:
        return EPOCH + self._vloop.time()

    def __getattr__(self, name: str) -> Any:
        return getattr(real_time, name)


@contextlib.contextmanager
def use_virtual_time(loop: VirtualTimeLoop, package: str = "nm_scanguard") -> Iterator[None]:
    """Point `time` in every module of `package` that imported it at the loop's clock."""
    stand_in = _VirtualTimeModule(loop)
    swapped: list[ModuleType] = []
    for name, module in list(sys.modules.items()):
        if (name == package or name.startswith(package + ".")) and module is not None \
                and getattr(module, "time", None) is real_time:
            module.time = stand_in  # type: ignore[attr-defined]
            swapped.append(module)
    try:
        yield
    finally:
        for module in swapped:
            module.time = real_time  # type: ignore[attr-defined]
