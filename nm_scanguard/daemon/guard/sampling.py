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
from ...peers.netlink import Counters, NetlinkError
from .problems import COUNTERS, ProblemSink


class Rates(NamedTuple):
    rx_bps: float  # bits per second
    tx_bps: float
    pps: float  # packets per second, rx + tx
    seconds: float = 0.0  # the interval these rates cover, ending at the sample's time

    @property
    def mbit(self) -> float:
        """The busier direction, in Mbit/s: an upload is as busy as a download."""
        return max(self.rx_bps, self.tx_bps) / 1e6


class RateMeter:
    """Turns successive counter readings into rates.

    A counter that goes down means the interface was reset or re-created (or a 32-bit counter
    wrapped): we cannot know how much traffic passed, so that interval yields no rate and the
    new reading becomes the baseline.  Guessing would risk engaging on a phantom burst.
    """

    def __init__(self) -> None:
        self._last: Counters | None = None

    def reset(self) -> None:
        self._last = None

    def update(self, now: Counters) -> Rates | None:
        last, self._last = self._last, now
        if last is None:
            return None
        dt = now.time - last.time
        deltas = (
            now.rx_bytes - last.rx_bytes,
            now.tx_bytes - last.tx_bytes,
            now.rx_packets - last.rx_packets,
            now.tx_packets - last.tx_packets,
        )
        if dt <= 0 or min(deltas) < 0:
            return None
        rx, tx, rxp, txp = deltas
        return Rates(rx_bps=rx * 8 / dt, tx_bps=tx * 8 / dt, pps=(rxp + txp) / dt, seconds=dt)


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
