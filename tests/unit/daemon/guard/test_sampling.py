"""Sampling (daemon/guard/sampling.py) on its own: a Sampler with real Problems, the fake counters of
test_guard, and a real Policy fed as the guard feeds it (read).  The guard's side (a sample,
then acting on it) is in test_guard."""

from __future__ import annotations

import asyncio
import errno
import time

import pytest

from nm_scanguard.config import Settings
from nm_scanguard.daemon.guard.policy import Policy
from nm_scanguard.daemon.guard.problems import Problems
from nm_scanguard.daemon.guard.sampling import Sampler
from nm_scanguard.peers.netlink import NetlinkError
from tests.unit.daemon.guard.test_guard import SETTINGS, FakeCounters


class Owner:
    """What a Sampler works with on a Guard: the problems, a step to run and where its errors
    go; and the policy that the guard hands the rates to."""

    def __init__(self, settings: Settings = SETTINGS) -> None:
        self.ifname = "wlan0"
        self.policy = Policy(settings)
        self.problems = Problems()
        self.steps = 0
        self.fail_with: Exception | None = None  # what the next step raises
        self.unexpected_errors: list[tuple[str, str]] = []

    @property
    def settings(self) -> Settings:
        return self.policy.settings

    async def step(self) -> None:
        self.steps += 1
        if self.fail_with is not None:
            e, self.fail_with = self.fail_with, None
            raise e

    def unexpected(self, e: BaseException, what: str) -> None:
        self.unexpected_errors.append((repr(e), what))

    def sampler(self, counters: FakeCounters) -> Sampler:
        return Sampler(self.ifname, counters, self.problems, self.settings)


def read(owner: Owner, s: Sampler) -> bool:
    """What Guard.step does with a read: hand it to the policy; whether there was a sample."""
    sample = s.read()
    if sample is None:
        owner.policy.observe_unknown(time.monotonic())
    else:
        owner.policy.observe(sample.time, sample.rates)
    return sample is not None


@pytest.fixture
def owner() -> Owner:
    return Owner()


@pytest.fixture
def counters() -> FakeCounters:
    return FakeCounters()


def test_counters_become_rates_for_the_policy(owner, counters):
    s = owner.sampler(counters)
    assert read(owner, s) and s.rates is None  # the first reading is only a baseline
    for _ in range(SETTINGS.engage_after):
        counters.traffic(8)
        assert read(owner, s)
    assert s.rates is not None and s.rates.mbit == pytest.approx(8)
    assert owner.policy.busy and owner.problems.text() == ""


def test_a_counter_read_the_kernel_fails_is_no_sample_and_shown(owner, counters):
    s = owner.sampler(counters)
    read(owner, s)
    counters.traffic(8)
    read(owner, s)
    counters.error = NetlinkError(errno.ETIMEDOUT, "no answer from the kernel")
    assert not read(owner, s) and s.rates is None
    assert owner.problems.text() == ("wlan0: cannot read the interface's traffic counters over "
                                     "rtnetlink (no answer from the kernel); trying again at "
                                     "every sample")
    counters.error = None
    counters.traffic(8)
    assert read(owner, s) and s.rates is None  # a new baseline: no rate across the gap
    assert owner.problems.text() == ""


def test_a_vanished_interface_is_no_sample(owner, counters, monkeypatch):
    """The policy counts the time without a sample (Policy.observe_unknown): busy, it lets go
    after release_after."""
    now = [5000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    s = owner.sampler(counters)
    read(owner, s)
    for _ in range(SETTINGS.engage_after):
        counters.traffic(8)
        read(owner, s)
    assert owner.policy.busy
    counters.gone = True
    assert not read(owner, s) and s.rates is None
    assert "interface has vanished" in owner.problems.text()
    now[0] += SETTINGS.release_after
    read(owner, s)
    assert not owner.policy.busy
    assert owner.policy.reason == "traffic unknown for 2 s (no counters)"


async def test_the_loop_steps_every_sample_interval_whatever_a_step_raises(counters):
    owner = Owner(SETTINGS.with_values({"sample_interval": 0.01}, "profile Café ☕"))
    owner.fail_with = KeyError("Café ☕")
    s = owner.sampler(counters)
    s.start(owner.step, owner.unexpected)
    for _ in range(200):
        await asyncio.sleep(0.01)
        if owner.steps >= 3:
            break
    await asyncio.wait_for(s.stop(), 3.0)
    assert owner.steps >= 3
    assert owner.unexpected_errors == [("KeyError('Café ☕')", "while sampling")]
    steps = owner.steps
    await asyncio.sleep(0.05)
    assert owner.steps == steps  # ended


async def test_stop_ends_a_loop_whose_cancellation_was_swallowed(counters):
    """Python 3.11's asyncio.wait_for swallows a cancellation that arrives as the awaited call
    completes (CPython gh-86296): every step here swallows its cancellation, and stop() must
    still end the loop promptly."""
    owner = Owner(SETTINGS.with_values({"sample_interval": 0.01}, "test"))
    swallowed = 0

    async def swallowing_step() -> None:
        nonlocal swallowed
        try:
            await asyncio.sleep(0.5)
        except asyncio.CancelledError:
            swallowed += 1

    owner.step = swallowing_step  # type: ignore[method-assign]
    s = owner.sampler(counters)
    s.start(owner.step, owner.unexpected)
    await asyncio.sleep(0.05)  # inside a step
    await asyncio.wait_for(s.stop(), 3.0)
    assert swallowed >= 1


async def test_stop_before_start_is_nothing(owner, counters):
    await owner.sampler(counters).stop()
