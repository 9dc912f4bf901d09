"""Sampling one guarded interface: the loop that has the guard take a sample every
sample_interval (Guard.step), and the start of each sample: the kernel's counters → rates →
the policy, with what a failed read shows.

A Sampler belongs to one Guard (its `SamplerOwner`) and changes nothing in wpa_supplicant: what the
policy then wants is the guard's to carry out.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from ...config import Settings
from ...peers.netlink import NetlinkError
from ...rates import Counters, RateMeter, Rates
from .policy import Policy
from .problems import COUNTERS, Problems


class CounterReader(Protocol):
    def read(self, ifname: str) -> Counters | None: ...


class SamplerOwner(Protocol):
    """What a Sampler asks of its Guard."""

    ifname: str
    policy: Policy
    problems: Problems

    @property
    def settings(self) -> Settings: ...

    @property
    def stopping(self) -> bool: ...

    async def step(self) -> None: ...

    def unexpected(self, e: BaseException, what: str) -> None: ...


class Sampler:
    def __init__(self, owner: SamplerOwner, counters: CounterReader) -> None:
        self._owner = owner
        self._counters = counters
        self.ifname = owner.ifname
        self.meter = RateMeter()
        self.rates: Rates | None = None  # the last sample's, None without one
        self._task: asyncio.Task[None] | None = None

    # ---- the loop ---------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"guard-{self.ifname}")

    async def stop(self) -> None:
        """End the loop; the owner says it is stopping first."""
        # Python 3.11's asyncio.wait_for swallows a cancellation that arrives just as the call
        # it waits for completes (CPython gh-86296, fixed in 3.12): then the sampling loop would
        # run on, and stop() waited a whole call timeout.  So the loop also checks `stopping`,
        # and the cancellation is repeated until the task has ended.
        while self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=0.5)
        self._task = None

    async def _run(self) -> None:
        owner = self._owner
        while not owner.stopping:
            await asyncio.sleep(owner.settings.sample_interval)
            try:
                await owner.step()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # keep guarding whatever one step did
                owner.unexpected(e, "while sampling")

    # ---- one sample -------------------------------------------------------------------------

    def read(self) -> bool:
        """Read the counters and hand the rates to the policy.  False when there is no sample
        this time: the counters could not be read, or the interface vanished (the policy
        counts that too: Policy.observe_unknown)."""
        owner = self._owner
        try:
            counters = self._counters.read(self.ifname)
        except NetlinkError as e:
            # An expected failure (a timeout, a refusal): no sample this time, as when the
            # interface vanished.
            owner.problems.fail(f"{self.ifname}: cannot read the interface's traffic counters over "
                                f"rtnetlink ({e.strerror or e}); trying again at every sample",
                                COUNTERS)
            self._unknown()
            return False
        owner.problems.clear(COUNTERS)
        if counters is None:
            owner.problems.fail(f"{self.ifname}: interface has vanished; waiting for "
                                "NetworkManager to notice")
            self._unknown()
            return False
        self.rates = self.meter.update(counters)
        owner.policy.observe(counters.time, self.rates)
        return True

    def _unknown(self) -> None:
        self.meter.reset()
        self.rates = None
        self._owner.policy.observe_unknown(time.monotonic())
