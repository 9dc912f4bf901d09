"""The policy with a fake clock: thresholds, both hystereses, signal floor, holds."""

import dataclasses

import pytest

from nm_scanguard.daemon.guard import policy as P
from nm_scanguard.config import Settings
from nm_scanguard.daemon.guard.policy import Policy
from nm_scanguard.daemon.guard.sampling import Rates

BASE = Settings(threshold_mbit=1.0, threshold_pps=60, engage_after=3, release_below_mbit=0.5,
                release_below_pps=30, release_after=10.0, signal_floor_dbm=-75.0,
                signal_hysteresis_db=5.0, signal_poll_interval=5.0)


def mbit(n, pps=0.0):
    return Rates(rx_bps=n * 1e6, tx_bps=0.0, pps=pps)


class Clock:
    def __init__(self):
        self.t = 1000.0

    def feed(self, policy, rates, n=1, dt=1.0):
        for _ in range(n):
            self.t += dt
            policy.observe(self.t, rates)


@pytest.fixture
def clock():
    return Clock()


def test_engages_after_n_consecutive_busy_samples(clock):
    p = Policy(BASE)
    clock.feed(p, mbit(5), n=2)
    assert p.state == P.IDLE and not p.want_engaged
    clock.feed(p, mbit(5))
    assert p.state == P.GUARDING and p.want_engaged
    assert "5.0 Mbit/s" in p.reason


def test_busy_streak_must_be_consecutive(clock):
    p = Policy(BASE)
    for _ in range(5):
        clock.feed(p, mbit(5), n=2)
        clock.feed(p, mbit(0.1))
    assert p.state == P.IDLE


def test_threshold_is_inclusive_and_upload_counts(clock):
    p = Policy(BASE)
    clock.feed(p, Rates(rx_bps=0, tx_bps=1.0e6, pps=10), n=3)
    assert p.state == P.GUARDING


def test_packet_rate_alone_engages_for_calls(clock):
    p = Policy(BASE)
    clock.feed(p, Rates(rx_bps=90e3, tx_bps=90e3, pps=100), n=3)  # a voice call: 50 pps each way
    assert p.state == P.GUARDING


def test_packet_threshold_zero_disables_packet_rule(clock):
    p = Policy(dataclasses.replace(BASE, threshold_pps=0))
    clock.feed(p, Rates(rx_bps=90e3, tx_bps=90e3, pps=5000), n=5)
    assert p.state == P.IDLE


def test_idle_chat_app_does_not_engage(clock):
    p = Policy(BASE)
    clock.feed(p, Rates(rx_bps=20e3, tx_bps=5e3, pps=8), n=600)
    assert p.state == P.IDLE


def test_release_needs_quiet_for_release_after_seconds(clock):
    p = Policy(BASE)
    clock.feed(p, mbit(50), n=3)
    clock.feed(p, mbit(0.1), n=10)  # quiet since the first of these: 9 s elapsed
    assert p.state == P.GUARDING
    clock.feed(p, mbit(0.1))
    assert p.state == P.IDLE and "quiet" in p.reason


def test_quiet_counts_from_the_start_of_the_first_quiet_interval(clock):
    """Rates cover the interval before their sample: 10 quiet 1 s samples are 10 s of quiet.
    (The lab measured a release one sample late when quiet was counted from the sample.)"""
    p = Policy(BASE)
    clock.feed(p, Rates(rx_bps=50e6, tx_bps=0.0, pps=0.0, seconds=1.0), n=3)
    quiet = Rates(rx_bps=0.1e6, tx_bps=0.0, pps=0.0, seconds=1.0)
    clock.feed(p, quiet, n=9)
    assert p.state == P.GUARDING
    clock.feed(p, quiet)
    assert p.state == P.IDLE and "quiet for 10 s" in p.reason


def test_the_reason_gives_each_samples_figures_while_traffic_guards(clock):
    """Issue 34: the reason froze at the figures of the moment of engaging."""
    p = Policy(BASE)
    clock.feed(p, Rates(rx_bps=8e6, tx_bps=0.0, pps=700, seconds=1.0), n=3)
    assert p.reason == "traffic 8.0 Mbit/s, 700 packets/s received and sent (threshold 1 Mbit/s or 60 packets/s)"
    clock.feed(p, Rates(rx_bps=0.0, tx_bps=3.2e6, pps=300, seconds=1.0))
    assert p.reason == "traffic 3.2 Mbit/s, 300 packets/s received and sent (threshold 1 Mbit/s or 60 packets/s)"
    clock.feed(p, Rates(rx_bps=0.1e6, tx_bps=0.0, pps=5, seconds=1.0), n=4)
    assert p.reason == "traffic 0.1 Mbit/s, 5 packets/s received and sent, quiet for 4 s (released after 10 s)"
    p.observe_signal(clock.t, -80)  # weak: the signal is the reason, and stays so
    clock.feed(p, Rates(rx_bps=9e6, tx_bps=0.0, pps=800, seconds=1.0))
    assert p.state == P.WEAK and p.reason.startswith("signal -80 dBm below the floor")
    no_pps = Policy(dataclasses.replace(BASE, threshold_pps=0))
    clock.feed(no_pps, mbit(2.5), n=3)
    assert no_pps.reason == "traffic 2.5 Mbit/s, 0 packets/s received and sent (threshold 1 Mbit/s)"


def test_band_between_release_and_threshold_keeps_guarding(clock):
    p = Policy(BASE)
    clock.feed(p, mbit(50), n=3)
    clock.feed(p, mbit(0.7), n=100)  # below threshold but not quiet: hysteresis keeps it
    assert p.state == P.GUARDING


def test_quiet_timer_restarts_on_a_burst(clock):
    p = Policy(BASE)
    clock.feed(p, mbit(50), n=3)
    clock.feed(p, mbit(0.1), n=8)
    clock.feed(p, mbit(0.8))  # not quiet
    clock.feed(p, mbit(0.1), n=8)
    assert p.state == P.GUARDING


def test_quiet_needs_low_packet_rate_too(clock):
    p = Policy(BASE)
    clock.feed(p, mbit(50), n=3)
    clock.feed(p, Rates(rx_bps=100e3, tx_bps=100e3, pps=45), n=60)
    assert p.state == P.GUARDING


def test_counter_reset_sample_counts_neither_way(clock):
    p = Policy(BASE)
    clock.feed(p, mbit(5), n=2)
    clock.feed(p, None)
    clock.feed(p, mbit(5))
    assert p.state == P.GUARDING
    clock.feed(p, mbit(0.1), n=5)
    clock.feed(p, None, n=20)
    assert p.state == P.GUARDING  # no evidence of quiet, keep what we had
    clock.feed(p, mbit(0.1))
    assert p.state == P.IDLE  # the quiet streak began before the gap and is now long enough


def test_signal_poll_only_when_wanted_then_every_interval(clock):
    p = Policy(BASE)
    assert not p.signal_poll_due(clock.t)
    clock.feed(p, mbit(5), n=3)
    assert p.signal_poll_due(clock.t)
    p.observe_signal(clock.t, -50)
    assert not p.signal_poll_due(clock.t + 4.9)
    assert p.signal_poll_due(clock.t + 5.0)


def test_signal_floor_releases_and_hysteresis_reengages(clock):
    p = Policy(BASE)
    clock.feed(p, mbit(5), n=3)
    p.observe_signal(clock.t, -60)
    assert p.want_engaged
    p.observe_signal(clock.t, -76)
    assert p.state == P.WEAK and not p.want_engaged
    assert "-76 dBm" in p.reason
    p.observe_signal(clock.t, -72)  # above the floor but inside the hysteresis
    assert p.state == P.WEAK
    p.observe_signal(clock.t, -70)
    assert p.state == P.GUARDING


def test_signal_exactly_at_floor_is_not_weak(clock):
    p = Policy(BASE)
    clock.feed(p, mbit(5), n=3)
    p.observe_signal(clock.t, -75)
    assert p.state == P.GUARDING


def test_failed_signal_poll_changes_nothing(clock):
    p = Policy(BASE)
    clock.feed(p, mbit(5), n=3)
    p.observe_signal(clock.t, -80)
    p.observe_signal(clock.t + 5, None)
    assert p.state == P.WEAK
    assert not p.signal_poll_due(clock.t + 5.5)  # a failed poll still counts as a poll


def test_near_the_floor_the_signal_is_read_every_sample(clock):
    p = Policy(BASE)  # floor -75, poll interval 5 s, one sample a second
    clock.feed(p, mbit(5), n=3)
    p.observe_signal(clock.t, -50)
    assert not p.signal_poll_due(clock.t + BASE.sample_interval)
    p.observe_signal(clock.t, -75 + P.NEAR_FLOOR_DB - 1)
    assert p.signal_poll_due(clock.t + BASE.sample_interval)
    assert not p.signal_poll_due(clock.t + BASE.sample_interval / 2)


def test_weak_signal_keeps_being_polled_while_traffic_wants_guard(clock):
    p = Policy(BASE)
    clock.feed(p, mbit(5), n=3)
    p.observe_signal(clock.t, -80)
    clock.feed(p, mbit(5), n=5)
    assert p.signal_poll_due(clock.t)


def test_hold_forces_guarding_without_traffic(clock):
    p = Policy(BASE)
    p.set_held(True)
    assert p.state == P.HELD and p.want_engaged and p.signal_poll_due(clock.t)
    p.set_held(False)
    assert p.state == P.IDLE and not p.want_engaged


def test_hold_still_subject_to_signal_floor(clock):
    p = Policy(BASE)
    p.set_held(True)
    p.observe_signal(clock.t, -90)
    assert p.state == P.WEAK and not p.want_engaged


def test_traffic_wins_over_hold_for_the_state_name(clock):
    p = Policy(BASE)
    p.set_held(True)
    clock.feed(p, mbit(5), n=3)
    assert p.state == P.GUARDING
    clock.feed(p, mbit(0), n=20)
    assert p.state == P.HELD  # traffic stopped but the hold remains


def test_disabled_never_wants_to_engage(clock):
    p = Policy(dataclasses.replace(BASE, enabled=False))
    p.set_held(True)
    clock.feed(p, mbit(500), n=10)
    assert p.state == P.DISABLED and not p.want_engaged and not p.signal_poll_due(clock.t)


@pytest.mark.parametrize("source,reason", [
    ("profile Café ☕", "enabled = no in profile Café ☕"),
    ("unreadable profile Café ☕", "its profile cannot be read (see the problem)"),
    ("/etc/scanguard/Café ☕.conf", "nm-scanguard is off: enabled = no in /etc/scanguard/Café ☕.conf"),
])
def test_settings_update_applies_to_next_samples(clock, source, reason):
    """Disabled, the reason says by whom: the profile, or the settings file, which is the
    administrator's off switch (Daemon.settings_for gives every connection the file's no)."""
    p = Policy(BASE)
    clock.feed(p, mbit(5), n=3)
    assert p.want_engaged
    p.update_settings(BASE.with_values({"enabled": False}, source))
    assert p.state == P.DISABLED and p.reason == reason and not p.want_engaged
    p.set_held(True)
    clock.feed(p, mbit(500), n=10)
    assert p.state == P.DISABLED and not p.want_engaged and not p.signal_poll_due(clock.t)


def test_an_idle_reason_gives_this_samples_figures_against_the_thresholds(clock):
    """Idle, the reason is live: not "no traffic yet" for the whole connection, nor the
    "quiet for" of the last release long after it."""
    p = Policy(BASE)
    assert p.reason == "no traffic yet"  # before the first sample
    clock.feed(p, Rates(rx_bps=0.2e6, tx_bps=0.0, pps=3, seconds=1.0))
    assert p.reason == "traffic 0.2 Mbit/s, 3 packets/s received and sent, under the threshold 1 Mbit/s or 60 packets/s"
    clock.feed(p, Rates(rx_bps=5e6, tx_bps=0.0, pps=400, seconds=1.0))
    assert p.state == P.IDLE
    assert p.reason == ("traffic 5.0 Mbit/s, 400 packets/s received and sent (threshold 1 Mbit/s or "
                        "60 packets/s; guarding after 3 busy samples in a row, 1 so far)")
    clock.feed(p, mbit(5), n=2)
    assert p.state == P.GUARDING
    clock.feed(p, mbit(0.1), n=11)
    assert p.state == P.IDLE and p.reason == "quiet for 10 s"  # the release says why
    clock.feed(p, mbit(0.3, pps=7))
    assert p.reason == "traffic 0.3 Mbit/s, 7 packets/s received and sent, under the threshold 1 Mbit/s or 60 packets/s"
    p.observe_unknown(clock.t + 1)
    p.observe_unknown(clock.t + 4)
    assert p.reason == "traffic unknown for 3 s (no counters)"


def test_a_hold_keeps_its_reason_while_the_link_is_idle(clock):
    p = Policy(BASE)
    p.set_held(True)
    clock.feed(p, mbit(0.1), n=3)
    assert p.state == P.HELD and p.reason == "held by an application"
