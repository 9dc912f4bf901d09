"""Sampling one guarded interface: the loop that has the guard take a sample every
sample_interval (Guard.step), and the start of each sample: the kernel's counters → rates, with
what a failed read shows.

A Sampler belongs to one Guard, which keeps its `settings` current and hands what it reads to
the policy; it changes nothing in wpa_supplicant.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import NamedTuple, Protocol

from ...config import Settings
from ...peers.netlink import NetlinkError
from ...peers.rates import Counters, RateMeter, Rates
from .problems import COUNTERS, ProblemSink


class CounterReader(Protocol):
    def read(self, ifname: str) -> Counters | None: ...


class Sample(NamedTuple):
    """One read of the counters: when (the counters' monotonic time), and the rates since the
    last read (None for a first read, or after the counters were reset)."""

    time: float
    rates: Rates | None


class Sampler:
    def __init__(self, ifname: str, counters: CounterReader, problems: ProblemSink,
                 settings: Settings) -> None:
        self._counters = counters
        self._problems = problems
        self.ifname = ifname
        self.settings = settings  # the guard's, kept current by it
        self.meter = RateMeter()
        self.rates: Rates | None = None  # the last sample's, None without one
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    # ---- the loop ---------------------------------------------------------------------------

    def start(self, step: Callable[[], Awaitable[None]],
              unexpected: Callable[[BaseException, str], None]) -> None:
        """Run `step` every sample_interval until stopped; what it raises goes to `unexpected`
        (what: "while sampling") and the loop goes on."""
        self._task = asyncio.create_task(self._run(step, unexpected), name=f"guard-{self.ifname}")

    async def stop(self) -> None:
        """End the loop."""
        # Python 3.11's asyncio.wait_for swallows a cancellation that arrives just as the call
        # it waits for completes (CPython gh-86296, fixed in 3.12): then the sampling loop would
        # run on, and stop() waited a whole call timeout.  So the loop also checks `_stopping`,
        # and the cancellation is repeated until the task has ended.
        self._stopping = True
        while self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=0.5)
        self._task = None

    async def _run(self, step: Callable[[], Awaitable[None]],
                   unexpected: Callable[[BaseException, str], None]) -> None:
        while not self._stopping:
            await asyncio.sleep(self.settings.sample_interval)
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # keep guarding whatever one step did
                unexpected(e, "while sampling")

    # ---- one sample -------------------------------------------------------------------------

    def read(self) -> Sample | None:
        """Read the counters.  None when there is no sample this time: the counters could not
        be read, or the interface vanished (the guard tells the policy: Policy.observe_unknown)."""
        try:
            counters = self._counters.read(self.ifname)
        except NetlinkError as e:
            # An expected failure (a timeout, a refusal): no sample this time, as when the
            # interface vanished.
            self._problems.fail(f"{self.ifname}: cannot read the interface's traffic counters "
                                f"over rtnetlink ({e.strerror or e}); trying again at every "
                                "sample", COUNTERS)
            self._unknown()
            return None
        self._problems.clear(COUNTERS)
        if counters is None:
            self._problems.fail(f"{self.ifname}: interface has vanished; waiting for "
                                "NetworkManager to notice")
            self._unknown()
            return None
        self.rates = self.meter.update(counters)
        return Sample(counters.time, self.rates)

    def _unknown(self) -> None:
        self.meter.reset()
        self.rates = None
