"""Sampling (daemon/guard/sampling.py) on its own: a Sampler with a fake owner (a real Policy and
Problems) and the fake counters of test_guard.  The guard's side (a sample, then acting on it)
is in test_guard."""

from __future__ import annotations

import asyncio
import errno

import pytest

from nm_scanguard.config import Settings
from nm_scanguard.daemon.guard import sampling
from nm_scanguard.daemon.guard.policy import Policy
from nm_scanguard.daemon.guard.problems import Problems
from nm_scanguard.daemon.guard.sampling import Sampler
from nm_scanguard.peers.netlink import NetlinkError
from tests.unit.daemon.guard.test_guard import SETTINGS, FakeCounters


class Owner:
    """What a Guard is to its Sampler: the policy, the problems, and a step to run."""

    def __init__(self, settings: Settings = SETTINGS) -> None:
        self.ifname = "wlan0"
        self.policy = Policy(settings)
        self.problems = Problems()
        self.stopping = False
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


@pytest.fixture
def owner() -> Owner:
    return Owner()


@pytest.fixture
def counters() -> FakeCounters:
    return FakeCounters()


def test_counters_become_rates_for_the_policy(owner, counters):
    s = Sampler(owner, counters)
    assert s.read() and s.rates is None  # the first reading is only a baseline
    for _ in range(SETTINGS.engage_after):
        counters.traffic(8)
        assert s.read()
    assert s.rates is not None and s.rates.mbit == pytest.approx(8)
    assert owner.policy.busy and owner.problems.text() == ""


def test_a_counter_read_the_kernel_fails_is_no_sample_and_shown(owner, counters):
    s = Sampler(owner, counters)
    s.read()
    counters.traffic(8)
    s.read()
    counters.error = NetlinkError(errno.ETIMEDOUT, "no answer from the kernel")
    assert not s.read() and s.rates is None
    assert owner.problems.text() == ("wlan0: cannot read the interface's traffic counters over "
                                     "rtnetlink (no answer from the kernel); trying again at "
                                     "every sample")
    counters.error = None
    counters.traffic(8)
    assert s.read() and s.rates is None  # a new baseline: no rate across the gap
    assert owner.problems.text() == ""


def test_a_vanished_interface_is_no_sample(owner, counters, monkeypatch):
    """The policy counts the time without a sample (Policy.observe_unknown): busy, it lets go
    after release_after."""
    now = [5000.0]
    monkeypatch.setattr(sampling.time, "monotonic", lambda: now[0])
    s = Sampler(owner, counters)
    s.read()
    for _ in range(SETTINGS.engage_after):
        counters.traffic(8)
        s.read()
    assert owner.policy.busy
    counters.gone = True
    assert not s.read() and s.rates is None
    assert "interface has vanished" in owner.problems.text()
    now[0] += SETTINGS.release_after
    s.read()
    assert not owner.policy.busy
    assert owner.policy.reason == "traffic unknown for 2 s (no counters)"


async def test_the_loop_steps_every_sample_interval_whatever_a_step_raises(counters):
    owner = Owner(SETTINGS.with_values({"sample_interval": 0.01}, "profile Café ☕"))
    owner.fail_with = KeyError("Café ☕")
    s = Sampler(owner, counters)
    s.start()
    for _ in range(200):
        await asyncio.sleep(0.01)
        if owner.steps >= 3:
            break
    owner.stopping = True
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
    s = Sampler(owner, counters)
    s.start()
    await asyncio.sleep(0.05)  # inside a step
    owner.stopping = True
    await asyncio.wait_for(s.stop(), 3.0)
    assert swallowed >= 1


async def test_stop_before_start_is_nothing(owner, counters):
    await Sampler(owner, counters).stop()
