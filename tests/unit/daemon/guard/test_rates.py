"""Counters to rates, including counters that go down (interface reset, 32-bit wrap)."""

import pytest

from nm_scanguard.daemon.guard.sampling import RateMeter
from nm_scanguard.peers.netlink import Counters


def c(t, rx=0, tx=0, rxp=0, txp=0):
    return Counters(time=t, rx_bytes=rx, tx_bytes=tx, rx_packets=rxp, tx_packets=txp)


def test_first_sample_has_no_rate():
    assert RateMeter().update(c(0.0)) is None


def test_rates_in_bits_and_packets_per_second():
    m = RateMeter()
    m.update(c(10.0, rx=1000, tx=0, rxp=10, txp=5))
    r = m.update(c(12.0, rx=1000 + 2_500_000, tx=250_000, rxp=210, txp=105))
    assert r.rx_bps == pytest.approx(10e6)
    assert r.tx_bps == pytest.approx(1e6)
    assert r.pps == pytest.approx(150)
    assert r.mbit == pytest.approx(10.0)


def test_counter_going_down_yields_no_rate_and_rebases():
    m = RateMeter()
    m.update(c(0.0, rx=10_000_000, rxp=10000))
    assert m.update(c(1.0, rx=500, rxp=3)) is None  # reset
    r = m.update(c(2.0, rx=125_500, rxp=103))
    assert r.rx_bps == pytest.approx(1e6) and r.pps == pytest.approx(100)


def test_32bit_wrap_is_treated_as_reset_not_as_a_burst():
    m = RateMeter()
    m.update(c(0.0, tx=2**32 - 1000))
    assert m.update(c(1.0, tx=5000)) is None


def test_clock_not_advancing_yields_no_rate():
    m = RateMeter()
    m.update(c(5.0, rx=0))
    assert m.update(c(5.0, rx=1000)) is None


def test_reset_forgets_baseline():
    m = RateMeter()
    m.update(c(0.0))
    m.reset()
    assert m.update(c(1.0, rx=10**9)) is None
